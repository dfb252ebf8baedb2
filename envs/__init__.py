"""Environments: one Gymnasium env per interaction type. Importing this registers them all."""
from envs.base import ENVS, AgentEnv, NextState, Status, StepResult, Task

__all__ = ["ENVS", "AgentEnv", "NextState", "Status", "StepResult", "Task"]
