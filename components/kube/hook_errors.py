"""Resource hooks whose every failure reaches the engine as one.

The SDK answers a hook that raised with `ResourceHookResponse(error=str(e))` (pulumi
sdk/python/lib/pulumi/runtime/_callbacks.py `do_register_resource_hook`), and the engine takes an
empty error for success (pkg/resource/deploy/source_eval.go `wrapResourceHookCallback`: `if
response.Error != ""`). `str(TimeoutError())` is "": such a hook would let its step run with no
cordon, drain, leave or mint. So every callback is wrapped: any exception (a cancellation too)
becomes a `HookFailed` naming the hook, the resource (whose name names the node) and the cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pulumi
import yaml

Callback = Callable[[pulumi.ResourceHookArgs], Awaitable[None]]


class HookFailed(RuntimeError):
    """A hook that failed; its message is never empty and carries no secret."""


def cause(error: BaseException) -> str:
    """`Type: message`, or `Type (no message)`. A YAML error quotes the document it failed on (a
    kubeconfig, with its key): only its type is told."""
    text = "" if isinstance(error, yaml.YAMLError) else str(error).strip()
    return f"{type(error).__name__}: {text}" if text else f"{type(error).__name__} (no message)"


def resource_hook(name: str, callback: Callback) -> pulumi.ResourceHook:
    """`pulumi.ResourceHook(name, ...)` running `callback`; any failure is a `HookFailed`."""

    async def run(args: pulumi.ResourceHookArgs) -> None:
        try:
            await callback(args)
        except (Exception, asyncio.CancelledError) as error:
            raise HookFailed(f"hook {name} of {args.name} failed: {cause(error)}") from error

    return pulumi.ResourceHook(name, run)
