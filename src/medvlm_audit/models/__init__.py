"""Model adapters. Heavy backends load lazily through :func:`medvlm_audit.models.registry.load_model`."""

from medvlm_audit.models.base import (
    Decoding,
    ErrorInfo,
    ImageData,
    LocalModel,
    Message,
    Model,
    ModelInput,
    Response,
    TextOnly,
    input_key,
)

__all__ = [
    "Decoding",
    "ErrorInfo",
    "ImageData",
    "LocalModel",
    "Message",
    "Model",
    "ModelInput",
    "Response",
    "TextOnly",
    "input_key",
]
