"""Simulated chat users (student, teacher) and the personalization benchmark of the paper."""
from envs.chat_sim.env import ChatSimEnv
from envs.chat_sim.persona import Persona, PersonaError, load_persona
from envs.chat_sim.score import held_out_tasks, personalization_score

__all__ = ["ChatSimEnv", "Persona", "PersonaError", "held_out_tasks", "load_persona", "personalization_score"]
