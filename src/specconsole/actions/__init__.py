"""Actions (kill training, deploy): plain async code that reports every step as a StepEvent."""
