# docker/podman.sh: podman as these machines need it, and the Debian base
# image made without a registry. Sourced (bash) by docker/container-test.sh
# and docker/newcomer-test.sh, which define before they source it:
#
#   W       the run's work folder (logs, containers.conf)
#   CACHE   where the base image's tarball is kept between runs
#   fail MSG, show FILE [N]   the caller's reporting
#
# It defines:
#   podman_install CMD=PKG...  installs, with apt-get, podman's packages and
#                              the caller's extra commands that are missing;
#                              sets PODMAN_INSTALLED to what it installed
#   podman_configure           writes $W/containers.conf, exports
#                              CONTAINERS_CONF
#   base_image                 debian:bookworm and debian:bookworm-slim in
#                              podman's store; sets BASE_HOW to how
#   remove_replaced ID...      removes the images ID... that no tag names
#                              any more (those a build just replaced)
#
# The facts behind it are in shared/notes/containers.md: no registry, a hard
# open-files limit under podman's default, hybrid cgroups that crun refuses.

BASE=docker.io/library/debian

# A command (or a file, when it starts with /), then the Debian package that
# provides it: what podman needs here, with bridge networks.
PODMAN_NEED='podman podman
buildah buildah
runc runc
debootstrap debootstrap
fuse-overlayfs fuse-overlayfs
newuidmap uidmap
catatonit catatonit
iptables iptables
/usr/lib/cni/dnsname golang-github-containernetworking-plugin-dnsname'

podman_install() {
  local need=$PODMAN_NEED pair missing
  for pair in "$@"; do need="$need
${pair%%=*} ${pair#*=}"; done
  missing=$(echo "$need" | while read -r cmd pkg; do
    case $cmd in /*) [ -e "$cmd" ] || echo "$pkg" ;; *) command -v "$cmd" >/dev/null 2>&1 || echo "$pkg" ;; esac
  done | sort -u | tr '\n' ' ')
  PODMAN_INSTALLED=$missing
  [ -n "$missing" ] || return 0
  [ "$(id -u)" = 0 ] || fail "missing packages; run: sudo apt-get install -y --no-install-recommends $missing"
  echo "installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$W/apt.log" 2>&1 ||
    { show "$W/apt.log"; fail "apt-get install $missing failed"; }
}

# podman's defaults fail on these machines: it asks for 1048576 open files,
# above the hard limit that even root cannot raise, and for more processes
# than it may have; and crun does not support their hybrid cgroups (runc
# does). Builds use the host's network; containers ask for a bridge.
podman_configure() {
  local hard
  [ "$(id -u)" = 0 ] || fail "podman here needs root (cgroupfs, bridge networks)"
  hard=$(ulimit -Hn)
  [ "$hard" = unlimited ] && hard=1048576
  cat >"$W/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$hard:$hard", "nproc=32768:32768"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF=$W/containers.conf
}

# debian:bookworm-slim as the official image is made (debuerreotype's slim
# variant): minbase, no docs, man pages or locales, and dpkg told to keep it
# so; the same image is tagged debian:bookworm. Its apt sources are this
# machine's Debian mirror, and nothing else.
make_base() {
  local mirror security rootfs=$CACHE/rootfs.$$ tar=$CACHE/debian-bookworm-slim.tar
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  security=$(awk '/^URIs:/ && $2 ~ /security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=${security:-${mirror%/debian}/debian-security}
  echo "debootstrap from $mirror (log: $W/debootstrap.log)"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$W/debootstrap.log" 2>&1 ||
    { show "$W/debootstrap.log"; rm -rf "$rootfs"; fail "debootstrap failed"; }
  rm -f "$rootfs/etc/apt/sources.list" "$rootfs/etc/resolv.conf"
  : >"$rootfs/etc/hostname"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# As in the official debian:*-slim images: no documentation, man pages or
# translations, in this image or in anything installed on it.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  rm -rf "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/* "$rootfs"/var/tmp/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/usr/share/groff/* "$rootfs"/usr/share/lintian/* "$rootfs"/usr/share/linda/*
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$rootfs/var/log" -type f -exec truncate -s 0 {} +
  tar --numeric-owner -C "$rootfs" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
  rm -rf "$rootfs"
}

base_image() {
  mkdir -p "$CACHE"
  BASE_HOW="in podman's store"
  if ! podman image exists $BASE:bookworm-slim || ! podman image exists $BASE:bookworm; then
    BASE_HOW="imported from $CACHE"
    [ -f "$CACHE/debian-bookworm-slim.tar" ] || { make_base; BASE_HOW="made with debootstrap, cached in $CACHE"; }
    podman import --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      "$CACHE/debian-bookworm-slim.tar" $BASE:bookworm-slim >"$W/import.log" 2>&1 ||
      { show "$W/import.log"; fail "podman import failed"; }
    podman image exists $BASE:bookworm || podman tag $BASE:bookworm-slim $BASE:bookworm
  fi
}

remove_replaced() {
  local id
  for id in "$@"; do
    [ -n "$(podman image inspect -f '{{.RepoTags}}' "$id" 2>/dev/null | tr -d '[]')" ] ||
      podman rmi "$id" >/dev/null 2>&1 || true
  done
}
