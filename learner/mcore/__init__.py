"""megatron-core parts of `learner=megatron`: HF <-> Megatron conversion and the model runtime."""
