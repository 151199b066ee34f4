"""A tiny OpenAI-compatible server standing in for a team's own: each chat is answered with the user's words in
reverse order, and every answer names the pod (``x-inference-pod``), as vLLM behind GAIE's EPP does."""
