"""Engines elsewhere behind the same EngineClient: a remote OpenAI-compatible server
(RemoteEngine), several replicas on one host (ReplicaPool), and the commands that serve a
console export on vLLM / vllm-ascend (launch_command)."""

from npu_console.engine.remote.client import RemoteEngine
from npu_console.engine.remote.errors import RemoteAuthError, RemoteConnectionError
from npu_console.engine.remote.launch import LaunchError, export_format, launch_command
from npu_console.engine.remote.replicas import ReplicaPool, ReplicaStats

__all__ = ["LaunchError", "RemoteAuthError", "RemoteConnectionError", "RemoteEngine",
           "ReplicaPool", "ReplicaStats", "export_format", "launch_command"]
