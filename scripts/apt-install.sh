#!/usr/bin/env bash
# Installs the Debian packages named after WHO that are not installed yet (apt, as root or via sudo); does
# nothing when VARRATE_SKIP_APT is set. The one package step of setup.sh, package.sh and check-format.sh.
# Usage: scripts/apt-install.sh WHO PACKAGE...   (WHO prefixes the message, e.g. "setup")
set -euo pipefail
who=$1
shift
[ -n "${VARRATE_SKIP_APT:-}" ] && exit 0
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "$who: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
