"""A real gRPC greeter (helloworld.Greeter/SayHello) on one or more loopback ports.

Each `--serve ADDR=NAME` starts a grpcio server on ADDR whose replies say NAME, so a test can tell
which backend answered. Messages are the helloworld protos, encoded by hand (field 1, a string) so
no generated code is needed. Prints `ready` once every server listens; runs until killed or stdin
closes (or, with --ignore-stdin, until killed).
"""
import argparse
import sys
import threading
from concurrent import futures

import grpc

METHOD = "/helloworld.Greeter/SayHello"


def field1(data: bytes) -> str:
    """The string in field 1 of a helloworld message (HelloRequest.name / HelloReply.message)."""
    if len(data) < 2 or data[0] != 0x0A:
        return ""
    length, shift, i = 0, 0, 1
    while i < len(data):
        b = data[i]
        length |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            break
        shift += 7
    return data[i : i + length].decode("utf-8", "replace")


def encode1(text: str) -> bytes:
    raw = text.encode()
    out = bytearray([0x0A])
    n = len(raw)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + raw


def handler(name: str):
    def say_hello(request: bytes, context) -> bytes:
        return encode1(f"hello {field1(request)} from {name}")

    method = grpc.unary_unary_rpc_method_handler(say_hello)

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            return method if details.method == METHOD else None

    return Handler()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="append", required=True, help="ADDR=NAME")
    parser.add_argument("--ignore-stdin", action="store_true", help="run until killed")
    args = parser.parse_args()
    servers = []
    for spec in args.serve:
        addr, _, name = spec.partition("=")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler(name),))
        if server.add_insecure_port(addr) == 0:
            sys.exit(f"cannot listen on {addr}")
        server.start()
        servers.append(server)
    print("ready", flush=True)
    if args.ignore_stdin:
        threading.Event().wait()
    sys.stdin.read()
    for server in servers:
        server.stop(0)


if __name__ == "__main__":
    main()
