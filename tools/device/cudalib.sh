# tools/device/cudalib.sh: sourced by the device scripts (check.sh,
# cores.sh). The bundle carries no CUDA library (bundle.sh leaves CUDA's to
# the device, and cuBLAS alone is hundreds of MB), and where the device's
# image keeps them has not been seen: /usr/local/cuda/lib64, where nvcc's
# toolkit puts them here, or only inside torch's wheels (site-packages/
# nvidia/...). A program whose libcudart is not found does not start, so
# the scripts look.
#
# cuda_libdirs BINARY: prints the directories, joined by ':', that hold the
# CUDA runtime BINARY is linked with (libcudart.so.N, from ldd) and the
# cuBLAS of the same major version (loaded at run time by the probe):
# from CUDA_LIB_FIRST (default: the toolkit's directories) where they are
# there, else the first found under CUDA_LIB_SEARCH (default: /usr/local,
# /opt and /usr/lib). Prints nothing for a BINARY without CUDA, or where
# none is found (ldd then names what is missing).
cuda_libdirs() {
  major=$(ldd "$1" 2>/dev/null |
    sed -n 's/.*libcudart\.so\.\([0-9][0-9]*\).*/\1/p' | head -n 1)
  [ -n "$major" ] || return 0
  found=""
  for lib in "libcudart.so.$major" "libcublas.so.$major" \
    "libcublasLt.so.$major"; do
    f=""
    for d in ${CUDA_LIB_FIRST-/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib}; do
      if [ -e "$d/$lib" ]; then
        f=$d/$lib
        break
      fi
    done
    if [ -z "$f" ]; then
      # shellcheck disable=SC2086 # the roots are words
      f=$(timeout 30 find ${CUDA_LIB_SEARCH:-/usr/local /opt /usr/lib} \
        -name "$lib" 2>/dev/null | head -n 1)
    fi
    [ -n "$f" ] || continue
    d=$(dirname "$f")
    case ":$found:" in
    *":$d:"*) ;;
    *) found=${found:+$found:}$d ;;
    esac
  done
  echo "$found"
}
