#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the container's own port through
# bash's /dev/tcp, so that the image needs no curl. Exits 0 on a 200.
port=${ATTND_PORT:-8080}
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
read -r -t 2 _ status _ <&3 || exit 1
[ "$status" = 200 ]
