# Opens N keep-alive connections to a proxy, sends one request on each, keeps them idle,
# and prints the proxy's RSS before and after.
import socket, sys, time
pid, port, url, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
before = rss(pid)
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    socks.append(s)
for s in socks:
    s.settimeout(10)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
time.sleep(1)
after = rss(pid)
print(f"connections={n} rss_before_kib={before} rss_after_kib={after} per_conn_kib={(after-before)/n:.1f}")
