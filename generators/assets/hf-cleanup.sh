# Removes one model from the shared Hugging Face cache. Maintenance only (profile
# `maintenance`): MODEL_NAME=org/name docker compose run --rm hf-cleanup
# Refuses the models this compose file pins (PROTECTED_MODELS).
set -eu
case "${MODEL_NAME:-}" in
  */*) ;;
  *) echo "hf-cleanup: set MODEL_NAME=org/name (the model to remove)" >&2; exit 2 ;;
esac
for protected in $PROTECTED_MODELS; do
  if [ "$MODEL_NAME" = "$protected" ]; then
    echo "hf-cleanup: $MODEL_NAME is pinned by this compose file; refusing" >&2
    exit 3
  fi
done
dir="/root/.cache/huggingface/hub/models--$(echo "$MODEL_NAME" | sed 's#/#--#g')"
if [ -d "$dir" ]; then
  du -sh "$dir"
  rm -rf "$dir"
  echo "hf-cleanup: removed $dir"
else
  echo "hf-cleanup: not cached: $dir"
fi
