"""A proxyless grpcio client calling the greeter through an `xds:///` target, forever.

The xDS bootstrap comes from GRPC_XDS_BOOTSTRAP, as for any grpcio application. Every
`--interval-ms` it calls SayHello (no wait-for-ready, so resolver errors show at once) and prints one
JSON line: {"ok": true, "reply": ...} or {"ok": false, "code": ..., "details": ...}. Stops after
`--seconds` or when stdin closes (unless --ignore-stdin), so it never outlives the test that started it.
"""
import argparse
import json
import sys
import threading
import time

import grpc

from greeter_server import METHOD, encode1, field1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--ignore-stdin", action="store_true")
    args = parser.parse_args()
    stop = threading.Event()
    if not args.ignore_stdin:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    channel = grpc.insecure_channel(args.target)
    call = channel.unary_unary(METHOD)
    deadline = time.monotonic() + args.seconds
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            reply = call(encode1("proxyless"), timeout=2)
            line = {"ok": True, "reply": field1(reply)}
        except grpc.RpcError as e:
            line = {"ok": False, "code": e.code().name, "details": e.details()}
        print(json.dumps(line), flush=True)
        stop.wait(args.interval_ms / 1000)
    channel.close()


if __name__ == "__main__":
    main()
