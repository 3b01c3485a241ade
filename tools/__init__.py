"""Developer tools: offline preview, config reference, benchmark."""
