"""The pure core: types, decoders, reducers, planners and policies. No I/O, no asyncio."""
