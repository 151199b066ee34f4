"""What the kit builds once into its cache (never into the user's environment): Jaeger v2, the Go dynamic
modules, the GAIE EPP, Go tools such as llm-d-inference-sim, and the repair of a known wheel clash."""
