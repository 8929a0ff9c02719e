"""Generation configs and production prompt templates: validation, canonical form, hashing
and rendering (pure: no ORM, no network).

A config is checked by the judges' rules for where a request may go and which key may travel
with it (`judges/config.py`: base-URL allow-list, private-network policy, key variables by
name); its canonical form fills every default, so that its hash names exactly what was sent.

Templates fill `{input}`, `{context}`, `{reference}`, `{external_id}` and `{metadata.KEY}`
from the item in ONE pass over the template: a value is inserted as it is and never scanned
again, so braces inside item text are sent literally (item text is data, not template).
`{{` and `}}` are literal braces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from judges.config import (
    DEFAULT_KEY_ENV_ALLOWED,
    PROVIDERS,
    RESERVED_KEY_ENV,
    Resolver,
    api_key_env_validate,
    base_url_access,
    base_url_validate,
    canonical_json,
    config_hash,
    fields_known,
    number_in_range,
    parameters_validate,
    prices_validate,
    refuse_secrets,
)
from reviewhub.errors import ValidationFailed

CONFIG_FIELDS = ("provider", "base_url", "model", "api_key_env", "parameters", "prices",
                 "timeout_s", "extra_body", "stream")
TEMPLATE_FIELDS = ("system", "user", "output_schema", "structured_output", "tools")
# OpenAI's limit on tools per request (Anthropic's is higher); both allow these names.
MAX_TOOLS = 128
_TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
ITEM_FIELDS = ("input", "context", "reference", "external_id")
MAX_TEMPLATE_CHARS = 100_000
MAX_TIMEOUT_S = 600.0
# Output tokens assumed for a cost estimate when the config sets no max_tokens.
DEFAULT_ESTIMATE_OUT_TOKENS = 512
# Fields a config's extra_body may not set: the request dataclass owns them.
_RESERVED_BODY = frozenset({"model", "messages", "system", "stream", "n", "tools",
                            "tool_choice", "response_format", "logprobs", "top_logprobs",
                            "temperature", "max_tokens", "seed"})

__all__ = ["canonical_json", "config_hash"]


def _fail(field: str, message: str, **context: Any) -> ValidationFailed:
    return ValidationFailed.at(field, message, **context)


def generation_config_validate(
    config: Any, *, allowed_base_urls: Iterable[str],
    allowed_key_env: Iterable[str] = DEFAULT_KEY_ENV_ALLOWED,
    reserved_key_env: Iterable[str] = RESERVED_KEY_ENV, allow_private_base_urls: bool = False,
    resolve: Resolver | None = None,
) -> dict[str, Any]:
    """The canonical config (every default explicit), or ValidationFailed naming the field."""
    if not isinstance(config, Mapping):
        raise _fail("config", "config must be an object.")
    fields_known("", config, CONFIG_FIELDS)
    provider = config.get("provider")
    if provider not in PROVIDERS:
        raise _fail("provider", f"provider must be one of {', '.join(PROVIDERS)} "
                                "(\"openai\" covers every OpenAI-compatible server).",
                    code="unknown_provider")
    allowed = list(allowed_base_urls)
    base_url = base_url_validate(config.get("base_url"), allowed,
                                 allow_private=allow_private_base_urls, resolve=resolve)
    access = base_url_access(base_url, allowed_prefixes=allowed,
                             allow_private=allow_private_base_urls, resolve=resolve)
    model = config.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        raise _fail("model", "model is required (a model name of at most 200 characters).")
    parameters = parameters_validate(provider, config.get("parameters"))
    timeout_s = number_in_range("timeout_s", config.get("timeout_s", 60.0), lo=1.0,
                        hi=MAX_TIMEOUT_S) or 60.0
    extra = config.get("extra_body") or {}
    if not isinstance(extra, Mapping):
        raise _fail("extra_body", "extra_body must be an object of extra request fields.")
    reserved = sorted(set(extra) & _RESERVED_BODY)
    if reserved:
        raise _fail("extra_body", f"extra_body may not set {', '.join(reserved)}; use the "
                                  "dedicated config fields.")
    canonical = {
        "provider": provider,
        "base_url": base_url,
        "model": model.strip(),
        "api_key_env": api_key_env_validate(config.get("api_key_env"), allowed=allowed_key_env,
                                            reserved=reserved_key_env, access=access),
        "parameters": parameters,
        "prices": prices_validate(config.get("prices")),
        "timeout_s": timeout_s,
        "extra_body": dict(extra),
    }
    stream = config.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("stream", "stream must be true or false.")
    if stream:
        # Only when set: configs saved before streaming existed keep their content hash.
        canonical["stream"] = True
    refuse_secrets({k: v for k, v in canonical.items() if k != "api_key_env"})
    try:
        canonical_json(canonical)
    except ValueError:
        raise _fail("extra_body", "extra_body must be plain JSON (no NaN or Infinity).") from None
    return canonical


# --- templates -------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*(?:\.[^{}\s]+)?)\}")


def placeholders_in(text: str) -> set[str]:
    """Every `{name}` / `{metadata.key}` the template refers to."""
    return {m.group(1) for m in _TOKEN_RE.finditer(text) if m.group(1)}


def _placeholder_ok(name: str) -> bool:
    return name in ITEM_FIELDS or (name.startswith("metadata.") and len(name) > len("metadata."))


def schema_check_valid(schema: Any, *, field: str = "output_schema") -> dict[str, Any]:
    """`schema` if it is a valid JSON Schema (by its own meta-schema), else ValidationFailed."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, Mapping):
        raise _fail(field, f"{field} must be a JSON Schema object.")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise _fail(field, f"{field} is not a valid JSON Schema: {exc.message}"
                    + (f" (at {where})" if where else ""), code="invalid_schema") from None
    return dict(schema)


def template_validate(
    template: Any, *, metadata_keys: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The canonical template, or ValidationFailed naming the field.

    `metadata_keys`: the metadata keys the study's items provide; a `{metadata.KEY}` none of
    them has is refused (None: not checked).
    """
    if not isinstance(template, Mapping):
        raise _fail("template", "template must be an object with system and user messages.")
    fields_known("", template, TEMPLATE_FIELDS)
    out: dict[str, Any] = {}
    keys = set(metadata_keys) if metadata_keys is not None else None
    for name in ("system", "user"):
        text = template.get(name, "")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise _fail(name, f"{name} must be a string.")
        if len(text) > MAX_TEMPLATE_CHARS:
            raise _fail(name, f"{name} is longer than {MAX_TEMPLATE_CHARS} characters.")
        for placeholder in sorted(placeholders_in(text)):
            if not _placeholder_ok(placeholder):
                raise _fail(name, f"{name}: unknown placeholder {{{placeholder}}}; available: "
                                  + ", ".join("{" + f + "}" for f in ITEM_FIELDS)
                                  + ", {metadata.KEY} (write {{ and }} for literal braces).",
                            placeholder=placeholder, code="unknown_placeholder")
            if keys is not None and placeholder.startswith("metadata."):
                key = placeholder.split(".", 1)[1]
                if key not in keys:
                    raise _fail(name, f"{name}: no item of the study has metadata {key!r} for "
                                      f"{{{placeholder}}}; item metadata keys: "
                                      f"{', '.join(sorted(keys)) or 'none'}.",
                                placeholder=placeholder, code="unknown_placeholder")
        out[name] = text
    if not out["user"].strip():
        raise _fail("user", "user is required: the message the application sends.")
    schema = template.get("output_schema")
    out["output_schema"] = None if schema is None else schema_check_valid(schema)
    structured = template.get("structured_output", False)
    if not isinstance(structured, bool):
        raise _fail("structured_output", "structured_output must be true or false.")
    if structured and out["output_schema"] is None:
        raise _fail("structured_output", "structured_output needs an output_schema to send.")
    out["structured_output"] = structured
    tools = template.get("tools")
    if tools is not None:
        # Only when given: templates saved before tools existed keep their content hash.
        if structured:
            raise _fail("tools", "tools and structured_output cannot be combined (Anthropic's "
                                 "structured output is itself a forced tool call).")
        out["tools"] = tools_validate(tools)
    try:
        canonical_json(out)
    except ValueError:
        raise _fail("output_schema", "output_schema must be plain JSON.") from None
    return out


def tools_validate(tools: Any) -> list[dict[str, Any]]:
    """The template's tool definitions in their canonical, provider-neutral form
    `{"name", "description", "parameters"}`, from either wire shape: OpenAI's
    `{"type": "function", "function": {"name", "description", "parameters"}}` or Anthropic's
    `{"name", "description", "input_schema"}`. ValidationFailed names `tools[i].<field>`."""
    if not isinstance(tools, list):
        raise _fail("tools", "tools must be a list of tool definitions (OpenAI or Anthropic "
                             "shape).")
    if len(tools) > MAX_TOOLS:
        raise _fail("tools", f"at most {MAX_TOOLS} tools.")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise _fail(at, f"{at} must be an object.")
        if tool.get("type") == "function" or "function" in tool:
            fields_known(at, tool, ("type", "function"))
            spec = tool.get("function")
            if not isinstance(spec, Mapping):
                raise _fail(f"{at}.function", f"{at}.function must be an object (OpenAI "
                                              "shape).")
            at = f"{at}.function"
            fields_known(at, spec, ("name", "description", "parameters"))
            schema_key = "parameters"
        else:
            spec = tool
            fields_known(at, spec, ("name", "description", "input_schema", "type"))
            if spec.get("type") not in (None, "custom"):
                raise _fail(f"{at}.type", f"{at}.type must be \"function\" (OpenAI) or "
                                          "absent (Anthropic).")
            schema_key = "input_schema"
        name = spec.get("name")
        if not isinstance(name, str) or not _TOOL_NAME_RE.fullmatch(name):
            raise _fail(f"{at}.name", f"{at}.name must be 1-64 letters, digits, _ or -.")
        if any(t["name"] == name for t in out):
            raise _fail(f"{at}.name", f"{at}.name {name!r} is given twice.")
        description = spec.get("description") or ""
        if not isinstance(description, str):
            raise _fail(f"{at}.description", f"{at}.description must be a string.")
        schema = spec.get(schema_key)
        if schema is None:
            schema = {"type": "object", "properties": {}}
        schema = schema_check_valid(schema, field=f"{at}.{schema_key}")
        if schema.get("type") != "object":
            raise _fail(f"{at}.{schema_key}", f"{at}.{schema_key} must be a JSON Schema of "
                                              "type object (the call's arguments).")
        out.append({"name": name, "description": description, "parameters": schema})
    return out


def tools_for(provider: str, tools: Any) -> list[dict[str, Any]]:
    """The canonical tools in `provider`'s wire shape (see `tools_validate`)."""
    out: list[dict[str, Any]] = []
    for t in tools or []:
        if provider == "anthropic":
            out.append({"name": t["name"], **({"description": t["description"]}
                                              if t.get("description") else {}),
                        "input_schema": t["parameters"]})
        else:
            out.append({"type": "function", "function": {
                "name": t["name"], **({"description": t["description"]}
                                      if t.get("description") else {}),
                "parameters": t["parameters"]}})
    return out


class MissingField(LookupError):
    """An item lacks what a placeholder asks for."""


def _item_value(name: str, item: Mapping[str, Any]) -> str:
    if name.startswith("metadata."):
        meta = item.get("metadata") or {}
        key = name.split(".", 1)[1]
        if not isinstance(meta, Mapping) or key not in meta or meta[key] is None:
            raise MissingField(f"item has no metadata {key!r} for {{{name}}}")
        value = meta[key]
        return value if isinstance(value, str) else canonical_json(value)
    return str(item.get(name) or "")


def render(text: str, item: Mapping[str, Any]) -> str:
    """Fill the placeholders of `text` from `item` in one pass (see the module docstring)."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return _item_value(match.group(1), item)

    return _TOKEN_RE.sub(one, text)


def missing_placeholders(template: Mapping[str, Any], item: Mapping[str, Any]) -> list[str]:
    """Placeholders of `template` that `item` does not provide."""
    out = []
    for name in ("system", "user"):
        for placeholder in sorted(placeholders_in(str(template.get(name) or ""))):
            try:
                _item_value(placeholder, item)
            except MissingField:
                out.append(placeholder)
    return out


def estimate_tokens(chars: int) -> int:
    """Prompt tokens guessed from characters (about four per token in English)."""
    return max(1, chars // 4)
