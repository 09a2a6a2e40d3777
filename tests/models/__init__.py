"""Tests of loopwise.models: the model port, the OpenAI adapters, clients."""
