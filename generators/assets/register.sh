#!/bin/sh
# Keeps this host registered with the model-proxy peers while its inference proxy serves.
# Source: generators/assets/register.sh (embedded into the compose file as a config).
#
# - Waits (up to 30 x 30 s) for an authenticated /v1/models through nginx.
# - Registers with every peer in MODEL_PROXY_URLS; with LONG_TIER_ONLY=true it first drops the
#   base-tier registration and registers the long-context discovery port and model instead.
# - Every 60 s: touches the liveness file the healthcheck reads, then probes a 1-token chat
#   completion. 2xx is healthy; 503 or a connection cut (curl 52/56) means alive but saturated;
#   a timeout (curl 28) falls back to /v1/models. Anything else counts as a failure, and
#   MAX_RETRIES consecutive failures unregister and exit 1 (the container restarts).
# - SIGTERM unregisters before exiting.
# - Bearer tokens reach curl as header files (`-H @FILE`, mode 0600), never as arguments: a
#   process's argv is readable by every user of the host in /proc/<pid>/cmdline. `printf` is a
#   shell builtin, so writing the files execs nothing that carries a token.
set -u

: "${HOST_IP:?}" "${HTTP_PORT:?}" "${TLS_PORT:?}" "${MODEL_NAME:?}" "${SERVER_NAME:?}"
: "${MODEL_PROXY_URLS:?}" "${MODEL_PROXY_TOKEN:?}" "${PROXY_TOKEN:?}"
LONG_TIER_ONLY=${LONG_TIER_ONLY:-false}
ALIVE_FILE=${REGISTRAR_ALIVE_FILE:-/tmp/registrar_alive}
MAX_RETRIES=3

HEADERS=$(umask 077 && mktemp -d) || exit 1
PEER_AUTH=$HEADERS/peer-authorization
INFERENCE_AUTH=$HEADERS/inference-authorization
(umask 077 && printf 'Authorization: Bearer %s\n' "$MODEL_PROXY_TOKEN" >"$PEER_AUTH") || exit 1
(umask 077 && printf 'Authorization: Bearer %s\n' "$PROXY_TOKEN" >"$INFERENCE_AUTH") || exit 1

if [ "$LONG_TIER_ONLY" = true ]; then
  : "${LONG_HTTP_PORT:?}" "${LONG_MODEL_NAME:?}" "${LONG_SERVER_NAME:?}"
  REG_PORT=$LONG_HTTP_PORT REG_MODEL=$LONG_MODEL_NAME REG_SERVER=$LONG_SERVER_NAME
else
  REG_PORT=$HTTP_PORT REG_MODEL=$MODEL_NAME REG_SERVER=$SERVER_NAME
fi

log() { echo "registrar: $*" >&2; }

# peer_call ACTION PORT MODEL SERVER: POSTs the registration to every peer.
peer_call() {
  body=$(printf '{"host":"%s","port":%s,"tls_port":%s,"model":"%s","server_name":"%s"}' \
    "$HOST_IP" "$2" "$TLS_PORT" "$3" "$4")
  for peer in $(echo "$MODEL_PROXY_URLS" | tr ',' ' '); do
    if curl -fsS --max-time 15 -X POST \
        -H "@$PEER_AUTH" -H 'Content-Type: application/json' \
        -d "$body" "$peer/v1/backends/$1" >/dev/null; then
      log "$1 $3 at $peer ok"
    else
      log "$1 $3 at $peer failed"
    fi
  done
}

registered=false
finish() {
  if [ "$registered" = true ]; then
    peer_call unregister "$REG_PORT" "$REG_MODEL" "$REG_SERVER"
  fi
  exit "$1"
}
trap 'finish 0' TERM INT

models_ok() {
  curl -fsS --max-time 10 -H "@$INFERENCE_AUTH" \
    "http://$HOST_IP:$HTTP_PORT/v1/models" >/dev/null 2>&1
}

# `sleep & wait` keeps the TERM trap responsive while waiting.
nap() { sleep "$1" & wait $!; }

tries=0
until models_ok; do
  tries=$((tries + 1))
  if [ "$tries" -ge 30 ]; then
    log "no authenticated /v1/models on $HOST_IP:$HTTP_PORT after 30 tries; exiting"
    exit 1
  fi
  nap 30
done

if [ "$LONG_TIER_ONLY" = true ]; then
  peer_call unregister "$HTTP_PORT" "$MODEL_NAME" "$SERVER_NAME"
fi
peer_call register "$REG_PORT" "$REG_MODEL" "$REG_SERVER"
registered=true

failures=0
probe='{"model":"'"$MODEL_NAME"'","messages":[{"role":"user","content":"ping"}],"max_tokens":1}'
while :; do
  touch "$ALIVE_FILE"
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 45 \
    -H "@$INFERENCE_AUTH" -H 'Content-Type: application/json' \
    -d "$probe" "http://$HOST_IP:$HTTP_PORT/v1/chat/completions")
  rc=$?
  case "$rc:$code" in
    0:2??) failures=0 ;;
    0:503 | 52:* | 56:*) log "alive but saturated (curl $rc, HTTP $code)"; failures=0 ;;
    28:*)
      if models_ok; then
        log "probe timed out but /v1/models answers: saturated"
        failures=0
      else
        failures=$((failures + 1))
      fi
      ;;
    *) failures=$((failures + 1)) ;;
  esac
  if [ "$failures" -ge "$MAX_RETRIES" ]; then
    log "$failures consecutive failed probes; unregistering"
    finish 1
  fi
  nap 60
done
