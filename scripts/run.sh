#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install and build (scripts/setup.sh), then open VarRate Studio on
# the embedded demo model with a generated needle document ready to run. Without a display the app cannot
# open: the script says so, runs the same side-by-side comparison in the terminal (`varrate demo`: one
# generated document, its question, the answers of full / varrate / flat / snapkv in both modes with their
# footprints) and shows how to render the window to a PNG.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
demo=resources/models/varrate-demo
if [ ! -f "$demo/model.safetensors" ]; then
  echo "The embedded demo model is not in this checkout ($demo/model.safetensors is missing)."
  echo "Train it with build/bin/varrate-train as $demo/MODEL_CARD.md describes, or open any Hugging Face"
  echo "Llama-family model: build/bin/varrate-studio --model DIR, build/bin/varrate demo --model DIR"
  exit 1
fi
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x build/bin/varrate-studio ]; then
  exec build/bin/varrate-studio "$@"
fi
echo
echo "No display (DISPLAY / WAYLAND_DISPLAY unset): VarRate Studio needs one. Render its window to a file with"
echo "  build/bin/varrate-studio --screenshot shot.png --run"
echo "Meanwhile, the side-by-side demonstration in the terminal (build/bin/varrate demo):"
echo
exec build/bin/varrate demo
