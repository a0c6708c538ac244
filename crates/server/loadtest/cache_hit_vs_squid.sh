#!/bin/bash
# Cache-hit throughput: webpep vs squid, 4 KB objects, 64 keep-alive connections (ab -k),
# both proxies in front of the same origin on loopback, in the same run.
set -u
# Usage: cargo build --release -p webpep-server --example proxy (in the repository; set
# CARGO_TARGET_DIR if the build goes elsewhere),
# apt-get install squid apache2-utils; then run this script (as root: squid drops to user proxy).
TARGET=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/target}
mkdir -p /tmp/wpbench && cp "$(dirname "$0")"/{origin.py,idle.py,squid.conf,webpep.toml} /tmp/wpbench/
chown proxy /tmp/wpbench 2>/dev/null
cd /tmp/wpbench
rm -rf cache; mkdir -p cache
python3 origin.py 18080 & OPID=$!
"$TARGET"/release/examples/proxy webpep.toml & WPID=$!
squid -N -f /tmp/wpbench/squid.conf & SPID=$!
sleep 3
URL=http://127.0.0.1:18080/obj4k
curl -s -o /dev/null -x 127.0.0.1:3130 $URL; curl -s -o /dev/null -x 127.0.0.1:3130 $URL
curl -s -o /dev/null -x 127.0.0.1:3129 $URL; curl -s -o /dev/null -x 127.0.0.1:3129 $URL
for round in 1 2; do
  for name in webpep:3130 squid:3129; do
    port=${name#*:}
    r=$(ab -q -k -n 50000 -c 64 -X 127.0.0.1:$port $URL 2>&1 | grep -E "Requests per second|Failed requests|Non-2xx" | tr -s ' ' | tr '\n' ' ')
    echo "round $round ${name%:*}: $r"
  done
done
curl -s http://127.0.0.1:3131/metrics | grep -E "cache_hits|cache_misses|requests_total\{mode=\"explicit\",class=\"2xx\"\}"
echo "idle connections (webpep, pid $WPID):"; python3 idle.py $WPID 3130 $URL 1000
echo "idle connections (squid, pid $SPID):"; python3 idle.py $SPID 3129 $URL 1000
kill $WPID $SPID $OPID; wait 2>/dev/null
