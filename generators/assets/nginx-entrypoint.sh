# Runs nginx and reloads it when the certificate changes, and every 6 hours regardless
# (certificates renewed in place by the host). Template: generators/assets/nginx-entrypoint.sh.
set -eu
certs=/etc/nginx/certs
cert_sum() { cat "$certs/fullchain.pem" "$certs/privkey.pem" 2>/dev/null | md5sum; }
nginx -g 'daemon off;' &
nginx_pid=$!
last=$(cert_sum)
minutes=0
while kill -0 "$nginx_pid" 2>/dev/null; do
  sleep 60
  minutes=$((minutes + 1))
  now=$(cert_sum)
  if [ "$now" != "$last" ] || [ "$minutes" -ge 360 ]; then
    if nginx -t; then nginx -s reload; fi
    last=$now
    minutes=0
  fi
done
wait "$nginx_pid"
