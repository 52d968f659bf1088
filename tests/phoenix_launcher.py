"""Starts Arize Phoenix with its OTLP/gRPC receiver bound to loopback: Phoenix binds gRPC to every interface
([::]) whatever PHOENIX_HOST says, so the bind address is rewritten before its server starts. Run with the
Python of the environment Phoenix is installed in: ``python tests/phoenix_launcher.py``."""

import runpy
import sys

import grpc.aio

_server = grpc.aio.server


def _loopback_server(*args, **kwargs):
    server = _server(*args, **kwargs)
    bind = server.add_insecure_port
    server.add_insecure_port = lambda address: bind(address.replace("[::]", "127.0.0.1"))
    return server


grpc.aio.server = _loopback_server
sys.argv = ["phoenix", "serve"]
runpy.run_module("phoenix.server.main", run_name="__main__")
