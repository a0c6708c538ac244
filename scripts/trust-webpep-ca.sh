#!/bin/sh
# Makes this user's Chromium and Firefox trust the device's webpep interception CA (an NSS
# database each; needs `certutil`, Debian's libnss3-tools). Undo with --remove.
#   scripts/trust-webpep-ca.sh [--remove] [CA_PEM]
# CA_PEM defaults to $XDG_DATA_HOME/webpep/ca/ca.pem (or ~/.local/share/webpep/ca/ca.pem).
set -eu
remove=0
if [ "${1:-}" = "--remove" ]; then remove=1; shift; fi
ca="${1:-${XDG_DATA_HOME:-$HOME/.local/share}/webpep/ca/ca.pem}"
nick=webpep
command -v certutil >/dev/null || { echo "certutil not found: apt-get install libnss3-tools" >&2; exit 2; }
if [ "$remove" = 0 ] && [ ! -r "$ca" ]; then
  echo "no CA certificate at $ca: run 'webpep client ca init' first" >&2; exit 2
fi
trust() {
  db="$1"
  if [ "$remove" = 1 ]; then
    certutil -d "sql:$db" -D -n "$nick" 2>/dev/null && echo "removed from $db" || true
  else
    certutil -d "sql:$db" -D -n "$nick" 2>/dev/null || true
    certutil -d "sql:$db" -A -t "C,," -n "$nick" -i "$ca"
    echo "trusted in $db"
  fi
}
# Chromium and Chrome on Linux share ~/.pki/nssdb.
if [ "$remove" = 0 ] && [ ! -d "$HOME/.pki/nssdb" ]; then
  mkdir -p "$HOME/.pki/nssdb" && certutil -d "sql:$HOME/.pki/nssdb" -N --empty-password
fi
[ -d "$HOME/.pki/nssdb" ] && trust "$HOME/.pki/nssdb"
# Each Firefox profile has its own database.
for p in "$HOME"/.mozilla/firefox/*/; do
  [ -f "$p/cert9.db" ] && trust "${p%/}"
done
exit 0
