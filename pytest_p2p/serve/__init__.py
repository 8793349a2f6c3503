"""Stage 3 — serve & load: vLLM (or the stand-in) per arm x pair, loaded through the OpenAI client."""
