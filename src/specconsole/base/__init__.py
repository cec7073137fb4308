"""The floor: what every layer of specconsole uses (errors, events, samples and their ages, paths, values,
validation of numbers, back-off, bounded HTTP bodies, shutdown deadlines, GC tuning, whether a pid runs); it
imports nothing of specconsole above it."""
