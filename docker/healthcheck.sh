#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the container's own port through
# bash's /dev/tcp, so that the image needs no curl. Exits 0 on a 200.
# It asks the address attnd listens on, ATTND_HOST (an attnd on ::1, or on
# a pod's IPv6 address, takes no connection on 127.0.0.1); for the
# unspecified address (0.0.0.0, or :: however spelt, which takes IPv4 too)
# 127.0.0.1, which a container with IPv6 turned off (Docker's default on a
# network without it: no ::1) still has. Without ATTND_HOST (--host or a
# config file set the address), attnd's default, 127.0.0.1.
port=${ATTND_PORT:-8080}
host=${ATTND_HOST:-127.0.0.1}
[ -n "${host//[0.:]/}" ] || host=127.0.0.1
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
read -r -t 2 _ status _ <&3 || exit 1
[ "$status" = 200 ]
