"""Training games sampled by serving engines: vLLM servers (started by the run, or already
running elsewhere) behind their OpenAI-compatible API, the learner's LoRA adapter pushed to
each of them after every step.

- ``modeldir``: the model a vLLM server loads (a packaged GGUF model de-quantized once
  into a float32 Hugging Face directory, cached).
- ``server``: one vLLM server process the run starts, watches and stops (``--sampler vllm``).
- ``pool``: the engines of a run (``--sampler openai:URL[,URL...]`` or the started ones):
  requests balanced by load, an engine that fails skipped or restarted, adapters loaded
  under a new name each step and the old ones unloaded.
- ``client``: the sampling client the trainer's games use (``sample``, with the engine's
  tokens and logprobs; ``compute_logprobs`` for the exact yardsticks).

docs/training.md, "Sampling on serving engines", says how to run them on one machine with
several GPUs and across machines.
"""
