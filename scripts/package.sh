#!/usr/bin/env bash
# Builds the Debian packages of VarRate Studio and checks them. Installs what it needs (like scripts/setup.sh),
# builds Release with the GUI into build/ (scripts/setup.sh), runs cpack, and writes
#   build/packages/varrate-cli_<version>_<arch>.deb     varrate, varrate-train, demo model, configs, man pages
#   build/packages/varrate-studio_<version>_<arch>.deb  the desktop app (depends on varrate-cli)
# then prints the checks, failing on any error: desktop-file-validate and appstreamcli validate --no-net on
# the files as packaged, lintian on the .deb files, and the contents and sizes of the packages.
# Environment as for scripts/setup.sh (BUILD_DIR, JOBS, CMAKE_ARGS, VARRATE_SKIP_APT=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}

tools=(dpkg-dev lintian desktop-file-utils appstream)
scripts/apt-install.sh package "${tools[@]}"

VARRATE_GUI=ON scripts/setup.sh
out="$BUILD_DIR/packages"
rm -f "$out"/*.deb
cpack --config "$BUILD_DIR/CPackConfig.cmake"
debs=("$out"/*.deb)

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$staging"; done

status=0
check() {  # check TITLE COMMAND...: prints the command's output; a failure fails the script at the end
  echo
  echo "== $1"
  shift
  if "$@"; then echo "-> ok"; else echo "-> FAILED"; status=1; fi
}
check "desktop-file-validate" desktop-file-validate "$staging"/usr/share/applications/*.desktop
check "appstreamcli validate --no-net" appstreamcli validate --no-net "$staging"/usr/share/metainfo/*.xml
# Only errors fail (--fail-on error); warnings and notes are shown.
check "lintian" lintian --fail-on error --display-info "${debs[@]}"

for deb in "${debs[@]}"; do
  echo
  echo "== $(basename "$deb") ($(du -h "$deb" | cut -f1), installed $(dpkg-deb --field "$deb" Installed-Size) KiB)"
  dpkg-deb --field "$deb" Package Version Architecture Depends
  dpkg-deb -c "$deb" | awk '{ printf "%s %10s  %s\n", $1, $3, $6 }'
done
echo
if [ $status -ne 0 ]; then
  echo "package: a check failed (see above)"
  exit 1
fi
echo "package: ${debs[*]}"
