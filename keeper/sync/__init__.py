"""Following the chain: historical range scans below finality, per-block realtime above it."""
