"""Asks a control plane for its clients' status over CSDS and prints it as JSON.

Uses the Envoy protos that `grpcio-csds` brings (its `xds-protos` dependency): the same stubs the
gRPC ecosystem's CSDS tools are built on. `--node-prefix` adds a node matcher; `--stream` uses
StreamClientStatus instead of FetchClientStatus. Output: one JSON object
{"clients": [{"node": id, "resources": [{"type", "name", "status", "version", "error", "has_config"}]}]}
"""
import argparse
import json

import grpc
from envoy.admin.v3 import config_dump_shared_pb2
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc
from envoy.type.matcher.v3 import node_pb2, string_pb2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--node-prefix")
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    request = csds_pb2.ClientStatusRequest()
    if args.node_prefix:
        request.node_matchers.append(
            node_pb2.NodeMatcher(node_id=string_pb2.StringMatcher(prefix=args.node_prefix))
        )
    with grpc.insecure_channel(args.server) as channel:
        stub = csds_pb2_grpc.ClientStatusDiscoveryServiceStub(channel)
        if args.stream:
            response = next(iter(stub.StreamClientStatus(iter([request]), timeout=10)))
        else:
            response = stub.FetchClientStatus(request, timeout=10)
    clients = []
    for config in response.config:
        resources = []
        for x in config.generic_xds_configs:
            resources.append(
                {
                    "type": x.type_url.rsplit(".", 1)[-1],
                    "name": x.name,
                    "status": config_dump_shared_pb2.ClientResourceStatus.Name(x.client_status),
                    "version": x.version_info,
                    "error": x.error_state.details if x.HasField("error_state") else None,
                    "has_config": x.HasField("xds_config"),
                }
            )
        clients.append({"node": config.node.id, "resources": resources})
    print(json.dumps({"clients": clients}))


if __name__ == "__main__":
    main()
