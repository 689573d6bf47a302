"""Engines elsewhere behind the same EngineClient: a remote OpenAI-compatible server
(RemoteEngine), several replicas on one host (ReplicaPool), and the commands that serve a
console export on vLLM / vllm-ascend (launch_command)."""

from .client import RemoteEngine
from .errors import RemoteAuthError, RemoteConnectionError
from .launch import LaunchError, export_format, launch_command
from .replicas import ReplicaPool, ReplicaStats

__all__ = ["LaunchError", "RemoteAuthError", "RemoteConnectionError", "RemoteEngine",
           "ReplicaPool", "ReplicaStats", "export_format", "launch_command"]
