"""Judge configs: validation, canonical form and content hash (pure; no ORM, no network).

A judge version is identified by `config_hash(canonical config)`. Canonicalisation fills every
default explicitly (the default prompt templates are copied in, the parser is named with its
version), so that a verdict can always be traced to the exact text and settings that produced
it, and so that changing a default in code can never silently change an existing version.
See docs/judges.md for the full reference.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from reviewhub.errors import ValidationFailed

# The allow-lists live in judges/network.py; the names imported with `as` are named here too,
# for the callers that have always imported them from this module.
from .network import (
    BASE_URL_SETTING,
    DEFAULT_KEY_ENV_ALLOWED,
    KEY_ENV_SETTING,
    PRIVATE_NETWORKS_SETTING,
    RESERVED_KEY_ENV,
    BaseUrlAccess,
    Resolver,
    UrlRefused,
    base_url_access,
    key_env_refusal,
    url_parts,
)
from .network import JudgeNetworkPolicy as JudgeNetworkPolicy
from .network import base_url_allowed as base_url_allowed
from .network import base_url_under as base_url_under
from .network import host_is_private as host_is_private
from .network import resolve_host as resolve_host
from .templates import (
    DEFAULT_SYSTEM_PROMPTS,
    DEFAULT_USER_PROMPTS,
    TRUSTED_PLACEHOLDERS,
    placeholders_in,
    template_validate,
)

SCALES = ("binary", "ordinal", "pairwise", "categorical")
SINGLE_SCALES = ("binary", "ordinal", "categorical")
PROVIDERS = ("openai", "anthropic")
RESPONSE_FORMATS = ("json_schema", "text")

# Parsers are versioned: a change in what a parser accepts is a new version, and the
# (name, version) pair is part of the config and therefore of the judge version's hash.
PARSERS: dict[str, tuple[int, ...]] = {"json_verdict": (1,)}
PARSER_FALLBACKS = ("final_line", "none")
DEFAULT_PARSER = {"name": "json_verdict", "version": 1, "fallback": "final_line"}

PROGRAMMATIC_CHECKS = ("json_schema", "regex", "match", "length", "errored")

ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Shapes of real credentials (OpenAI/Anthropic/xAI/Groq/HF/GitHub/AWS/Google, our own rh_
# tokens, bearer strings). A config is stored and shown to every lead: a key pasted into it
# would leak, so such values are refused wherever they appear.
_KEY_LIKE_RE = re.compile(
    r"(?:^|[^A-Za-z0-9])(?:sk-[A-Za-z0-9_\-]{20,}|sk_[A-Za-z0-9]{16,}|xai-[A-Za-z0-9]{16,}|"
    r"gsk_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[A-Z0-9]{16}|"
    r"AIza[A-Za-z0-9_\-]{30,}|rh_[A-Za-z0-9_\-]{20,}|Bearer\s+[A-Za-z0-9._\-]{16,})"
)
_SECRET_FIELD_NAMES = frozenset(
    {"api_key", "apikey", "key", "secret", "token", "password", "authorization",
     "x-api-key", "access_token"}
)

MAX_PROMPT_CHARS = 50_000
MAX_SAMPLES = 50
MAX_TOP_LOGPROBS = 20
MAX_TIMEOUT_S = 600.0


def _fail(field: str, message: str, **context: Any) -> ValidationFailed:
    """One problem at `field` (the config path) in the one details shape."""
    return ValidationFailed.at(field, message, **context)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: the byte string that the hash covers."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a (canonicalised) config."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()


def base_url_validate(
    url: Any, allowed_prefixes: Iterable[str], *, allow_private: bool = False,
    resolve: Resolver | None = None,
) -> str:
    """The base URL as stored, or ValidationFailed (field `base_url`)."""
    return _base_url_checked(url, allowed_prefixes, allow_private=allow_private,
                             resolve=resolve)[0]


def _base_url_checked(
    url: Any, allowed_prefixes: Iterable[str], *, allow_private: bool,
    resolve: Resolver | None,
) -> tuple[str, BaseUrlAccess]:
    if not isinstance(url, str) or not url.strip():
        raise _fail("base_url", "base_url is required (e.g. https://api.openai.com/v1).")
    url = url.strip()
    try:
        url_parts(url)
    except UrlRefused as exc:
        raise _fail("base_url", f"base_url {url!r} {exc}.") from None
    prefixes = [p.strip() for p in allowed_prefixes if p.strip()]
    access = base_url_access(url, allowed_prefixes=prefixes, allow_private=allow_private,
                             resolve=resolve)
    if access.kind == "refused":
        raise ValidationFailed.at(
            "base_url", access.reason, url=url, setting=BASE_URL_SETTING, allowed=prefixes,
            code="base_url_not_allowed",
        )
    return url.rstrip("/"), access


# --- secrets -------------------------------------------------------------------------------


def _walk_strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk_strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk_strings(v, f"{path}[{i}]")


def _walk_keys(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            yield here, str(k)
            yield from _walk_keys(v, here)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk_keys(v, f"{path}[{i}]")


def refuse_secrets(config: Mapping[str, Any]) -> None:
    """Refuse configs that carry a credential (a key-shaped value or a key-named field)."""
    for path, name in _walk_keys(config, ""):
        if name.lower() in _SECRET_FIELD_NAMES:
            raise _fail(path, f"'{path}': a judge config never holds a key; put the key in an "
                              "environment variable and give its NAME in api_key_env.")
    for path, text in _walk_strings(config, ""):
        if _KEY_LIKE_RE.search(text):
            raise _fail(path, f"'{path}' looks like an API key; a judge config never holds a "
                              "key: set it in an environment variable and give the variable's "
                              "NAME in api_key_env.")


def api_key_env_validate(
    value: Any, *, allowed: Iterable[str] = DEFAULT_KEY_ENV_ALLOWED,
    reserved: Iterable[str] = RESERVED_KEY_ENV, access: BaseUrlAccess | None = None,
) -> str | None:
    """The key variable's name, or ValidationFailed (field `api_key_env`): a name, not a key;
    on the operator's allow-list and not one of ReviewHub's own; and only for a listed base
    URL (`access`), never for one admitted as a private-network endpoint."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _fail("api_key_env", "api_key_env must be an environment variable name or null.")
    # Key prefixes are lower-case (sk-, xai-, ...) while variable names are upper-case, so
    # this cannot refuse a real name such as RH_JUDGE_KEY.
    if value.startswith(("sk-", "sk_", "xai-", "gsk_", "hf_", "rh_", "Bearer ", "bearer ")) or (
        _KEY_LIKE_RE.search(value)
    ):
        raise _fail("api_key_env", "api_key_env looks like an API key. Give the NAME of the "
                                   "environment variable that holds the key (e.g. "
                                   "OPENAI_API_KEY), never the key itself.")
    if not ENV_NAME_RE.match(value) or len(value) > 128:
        raise _fail("api_key_env", f"api_key_env {value!r} is not an environment variable name "
                                   "(upper-case letters, digits and _, not starting with a "
                                   "digit, e.g. OPENAI_API_KEY).")
    # A long run of letters and digits without a single underscore is how keys look
    # (e.g. AKIA…, base32 secrets), not how variable names do.
    if "_" not in value and len(value) >= 20 and any(c.isdigit() for c in value):
        raise _fail("api_key_env", "api_key_env looks like a key rather than a variable name.")
    allowed = list(allowed)
    refusal = key_env_refusal(value, allowed=allowed, reserved=reserved)
    if refusal:
        raise ValidationFailed.at("api_key_env", refusal, name=value, setting=KEY_ENV_SETTING,
                                  allowed=allowed, code="api_key_env_not_allowed")
    if access is not None and not access.listed:
        raise ValidationFailed.at(
            "api_key_env",
            f"api_key_env must be null here: a key is only sent to base URLs listed in "
            f"{BASE_URL_SETTING}, and this one is admitted as a private-network endpoint "
            f"({PRIVATE_NETWORKS_SETTING}). An operator can list its prefix.",
            name=value, setting=BASE_URL_SETTING, code="api_key_env_not_allowed")
    return value


# --- pieces ------------------------------------------------------------------------------


def number_in_range(field: str, value: Any, *, lo: float, hi: float) -> float | None:
    """`value` as a float in [lo, hi] (None stays None), or a 400 naming `field`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(field, f"{field} must be a number.")
    if not lo <= value <= hi:
        raise _fail(field, f"{field} must be between {lo} and {hi}.")
    return float(value)


def integer_in_range(field: str, value: Any, *, lo: int, hi: int) -> int | None:
    """`value` as an int in [lo, hi] (None stays None), or a 400 naming `field`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"{field} must be an integer.")
    if not lo <= value <= hi:
        raise _fail(field, f"{field} must be between {lo} and {hi}.")
    return int(value)


def fields_known(section: str, value: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """A 400 naming the first field of `value` (under `section`) that is not `allowed`."""
    extra = sorted(set(value) - set(allowed))
    if extra:
        where = f"{section}." if section else ""
        raise _fail(f"{where}{extra[0]}", f"unknown field(s) {', '.join(where + e for e in extra)};"
                    f" allowed: {', '.join(sorted(allowed))}.", unknown=extra)


def parser_validate(value: Any) -> dict[str, Any]:
    if value is None or value == {}:
        return dict(DEFAULT_PARSER)
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, Mapping):
        raise _fail("parser", "parser must be an object like "
                              '{"name": "json_verdict", "version": 1, "fallback": "final_line"}.')
    fields_known("parser", value, ("name", "version", "fallback"))
    name = value.get("name", DEFAULT_PARSER["name"])
    if name not in PARSERS:
        raise _fail("parser.name", f"unknown parser {name!r}; available: {', '.join(PARSERS)}.")
    version = value.get("version", max(PARSERS[name]))
    if version not in PARSERS[name]:
        raise _fail("parser.version", f"parser {name} has no version {version!r}; available: "
                                      f"{', '.join(map(str, PARSERS[name]))}.")
    fallback = value.get("fallback", DEFAULT_PARSER["fallback"])
    if fallback is None:
        fallback = "none"
    if fallback not in PARSER_FALLBACKS:
        raise _fail("parser.fallback", f"parser fallback must be one of {PARSER_FALLBACKS}.")
    return {"name": name, "version": version, "fallback": fallback}


def prices_validate(value: Any) -> dict[str, float] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _fail("prices", 'prices must be {"input_per_mtok": USD, "output_per_mtok": USD}.')
    fields_known("prices", value, ("input_per_mtok", "output_per_mtok"))
    out: dict[str, float] = {}
    for key in ("input_per_mtok", "output_per_mtok"):
        if key not in value:
            raise _fail(f"prices.{key}", f"prices.{key} is required (USD per million tokens).")
        number = number_in_range(f"prices.{key}", value[key], lo=0.0, hi=1e6)
        assert number is not None
        out[key] = number
    return out


def _prompt_map(field: str, value: Any, defaults: Mapping[str, str]) -> dict[str, str]:
    """A prompt given as a string or {scale: string}; missing scales get the defaults."""
    out = dict(defaults)
    if value is None:
        return out
    if isinstance(value, str):
        names = placeholders_in(value)
        if field == "system_prompt":
            targets: tuple[str, ...] = SCALES
        elif {"output_a", "output_b"} & names:
            targets = ("pairwise",)
        else:
            targets = SINGLE_SCALES
        value = {scale: value for scale in targets}
    if not isinstance(value, Mapping):
        raise _fail(field, f"{field} must be a string or an object keyed by scale "
                           f"({', '.join(SCALES)}).")
    fields_known(field, value, SCALES)
    for scale, text in value.items():
        if not isinstance(text, str) or not text.strip():
            raise _fail(f"{field}.{scale}", f"{field}.{scale} must be a non-empty string.")
        if len(text) > MAX_PROMPT_CHARS:
            raise _fail(f"{field}.{scale}", f"{field}.{scale} is longer than "
                                            f"{MAX_PROMPT_CHARS} characters.")
        out[scale] = text
    return out


def _prompts_check(system: Mapping[str, str], user: Mapping[str, str]) -> None:
    for scale in SCALES:
        template_validate(system[scale], field=f"system_prompt.{scale}")
        names = template_validate(user[scale], field=f"user_prompt.{scale}")
        system_names = template_validate(system[scale], field=f"system_prompt.{scale}")
        untrusted = sorted(system_names - TRUSTED_PLACEHOLDERS)
        if untrusted:
            raise _fail(f"system_prompt.{scale}",
                        f"system_prompt.{scale} uses {', '.join('{' + n + '}' for n in untrusted)}"
                        ": untrusted text (input, context, reference, outputs) may only appear "
                        "in the user prompt, inside delimited blocks.")
        needed = {"output_a", "output_b"} if scale == "pairwise" else {"output"}
        missing = sorted(needed - names)
        if missing:
            raise _fail(f"user_prompt.{scale}",
                        f"user_prompt.{scale} must contain "
                        f"{' and '.join('{' + n + '}' for n in missing)} so that the judge sees "
                        "what it grades.")
        wrong = {"output_a", "output_b"} & names if scale != "pairwise" else {"output"} & names
        if wrong:
            raise _fail(f"user_prompt.{scale}",
                        f"user_prompt.{scale} uses {', '.join(sorted(wrong))}, which "
                        f"{scale} criteria do not have.")


# --- whole configs -------------------------------------------------------------------------

LLM_FIELDS = (
    "provider", "base_url", "model", "model_family", "api_key_env", "system_prompt",
    "user_prompt", "parameters", "response_format", "parser", "samples", "logprobs",
    "top_logprobs", "prices", "timeout_s", "extra_body",
)
PARAMETER_FIELDS = ("temperature", "max_tokens", "seed", "top_p")


def parameters_validate(provider: str, raw: Any) -> dict[str, Any]:
    """The sampling parameters, all four explicit (Anthropic's max_tokens defaults to 1024);
    a judge config and a generation config take the same ones."""
    params = raw or {}
    if not isinstance(params, Mapping):
        raise _fail("parameters", "parameters must be an object.")
    fields_known("parameters", params, PARAMETER_FIELDS)
    max_tokens = integer_in_range("parameters.max_tokens", params.get("max_tokens"),
                                  lo=1, hi=200_000)
    if provider == "anthropic" and max_tokens is None:
        # The messages API requires it; making the default explicit keeps the hash honest.
        max_tokens = 1024
    parameters = {
        "temperature": number_in_range("parameters.temperature", params.get("temperature"), lo=0.0,
                               hi=2.0),
        "max_tokens": max_tokens,
        "seed": integer_in_range("parameters.seed", params.get("seed"), lo=-(2**63), hi=2**63 - 1),
        "top_p": number_in_range("parameters.top_p", params.get("top_p"), lo=0.0, hi=1.0),
    }
    if provider == "anthropic" and parameters["seed"] is not None:
        raise _fail("parameters.seed", "Anthropic's messages API has no seed; remove it.")
    return parameters


def _logprobs_validate(config: Mapping[str, Any], provider: str) -> tuple[bool, int | None]:
    """Whether to ask for logprobs, and how many alternatives (5 when logprobs and unset)."""
    logprobs = config.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise _fail("logprobs", "logprobs must be true or false.")
    if logprobs and provider == "anthropic":
        raise _fail("logprobs", "Anthropic's messages API does not return logprobs; set "
                                "logprobs to false (use samples > 1 for a probability).")
    top_logprobs = integer_in_range("top_logprobs", config.get("top_logprobs"), lo=1,
                            hi=MAX_TOP_LOGPROBS)
    if logprobs and top_logprobs is None:
        top_logprobs = 5
    if not logprobs and top_logprobs is not None:
        raise _fail("top_logprobs", "top_logprobs needs logprobs: true.")
    return logprobs, top_logprobs


def _extra_body_validate(raw: Any) -> Mapping[str, Any]:
    """Extra request fields, none of which may set what a dedicated config field sets."""
    extra = raw or {}
    if not isinstance(extra, Mapping):
        raise _fail("extra_body", "extra_body must be an object of extra request fields.")
    reserved = sorted(set(extra) & {"model", "messages", "system", "stream", "n", "tools",
                                    "tool_choice", "response_format", "logprobs",
                                    "top_logprobs", "temperature", "max_tokens", "seed"})
    if reserved:
        raise _fail("extra_body", f"extra_body may not set {', '.join(reserved)}; use the "
                                  "dedicated config fields.")
    return extra


def llm_config_validate(
    config: Mapping[str, Any], *, allowed_base_urls: Iterable[str],
    allowed_key_env: Iterable[str] = DEFAULT_KEY_ENV_ALLOWED,
    reserved_key_env: Iterable[str] = RESERVED_KEY_ENV, allow_private_base_urls: bool = False,
    resolve: Resolver | None = None,
) -> dict[str, Any]:
    """Validate an LLM judge config and return its canonical form (all defaults explicit).

    The allow-lists are the operator's (`JudgeNetworkPolicy.from_settings`); `resolve` looks
    host names up when a private-network endpoint is admitted by `allow_private_base_urls`.
    """
    fields_known("", config, LLM_FIELDS)
    provider = config.get("provider")
    if provider not in PROVIDERS:
        raise _fail("provider", f"provider must be one of {', '.join(PROVIDERS)} "
                                "(\"openai\" covers every OpenAI-compatible server).")
    base_url, access = _base_url_checked(config.get("base_url"), allowed_base_urls,
                                         allow_private=allow_private_base_urls,
                                         resolve=resolve)
    model = config.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        raise _fail("model", "model is required (a model name of at most 200 characters).")
    family = config.get("model_family", "")
    if not isinstance(family, str) or len(family) > 100:
        raise _fail("model_family", "model_family must be a string of at most 100 characters.")

    parameters = parameters_validate(provider, config.get("parameters"))

    response_format = config.get("response_format", "json_schema")
    if response_format not in RESPONSE_FORMATS:
        raise _fail("response_format", f"response_format must be one of {RESPONSE_FORMATS} "
                                       "(json_schema: structured output / a forced tool call; "
                                       "text: plain text read by the strict parser).")
    samples = integer_in_range("samples", config.get("samples", 1), lo=1, hi=MAX_SAMPLES) or 1
    logprobs, top_logprobs = _logprobs_validate(config, provider)
    timeout_s = number_in_range("timeout_s", config.get("timeout_s", 60.0), lo=1.0,
                        hi=MAX_TIMEOUT_S) or 60.0
    extra = _extra_body_validate(config.get("extra_body"))
    system = _prompt_map("system_prompt", config.get("system_prompt"), DEFAULT_SYSTEM_PROMPTS)
    user = _prompt_map("user_prompt", config.get("user_prompt"), DEFAULT_USER_PROMPTS)
    _prompts_check(system, user)

    canonical = {
        "provider": provider,
        "base_url": base_url,
        "model": model.strip(),
        "model_family": family.strip(),
        "api_key_env": api_key_env_validate(config.get("api_key_env"),
                                            allowed=allowed_key_env,
                                            reserved=reserved_key_env, access=access),
        "system_prompt": system,
        "user_prompt": user,
        "parameters": parameters,
        "response_format": response_format,
        "parser": parser_validate(config.get("parser")),
        "samples": samples,
        "logprobs": logprobs,
        "top_logprobs": top_logprobs,
        "prices": prices_validate(config.get("prices")),
        "timeout_s": timeout_s,
        "extra_body": dict(extra),
    }
    refuse_secrets(canonical)
    _json_safe(canonical)
    return canonical


def _json_safe(config: Mapping[str, Any]) -> None:
    try:
        canonical_json(config)
    except (TypeError, ValueError) as exc:
        raise _fail("config", f"config is not plain JSON: {exc}") from None


def _regex_list(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(field, f"{field} must be a regular expression or a list of them.")
    for pattern in value:
        if len(pattern) > 2000:
            raise _fail(field, f"{field}: a pattern is longer than 2000 characters.")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail(field, f"{field}: {pattern!r} is not a valid regular expression "
                               f"({exc}).") from None
    return list(value)


def programmatic_config_validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a programmatic check config and return its canonical form."""
    check = config.get("check")
    if check not in PROGRAMMATIC_CHECKS:
        raise _fail("check", f"check must be one of {', '.join(PROGRAMMATIC_CHECKS)}.")
    out: dict[str, Any] = {"check": check}
    if check == "json_schema":
        fields_known("", config, ("check", "schema"))
        schema = config.get("schema")
        if schema is None:
            out["schema"] = None  # the study's output schema
        else:
            import jsonschema

            if not isinstance(schema, Mapping):
                raise _fail("schema", "schema must be a JSON schema object (or null for the "
                                      "study's output schema).")
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise _fail("schema", f"schema is not a valid JSON schema: {exc.message}") from None
            out["schema"] = dict(schema)
    elif check == "regex":
        fields_known("", config, ("check", "must_match", "must_not_match", "ignore_case"))
        out["must_match"] = _regex_list("must_match", config.get("must_match"))
        out["must_not_match"] = _regex_list("must_not_match", config.get("must_not_match"))
        if not out["must_match"] and not out["must_not_match"]:
            raise _fail("must_match", "a regex check needs must_match and/or must_not_match.")
        ignore_case = config.get("ignore_case", False)
        if not isinstance(ignore_case, bool):
            raise _fail("ignore_case", "ignore_case must be true or false.")
        out["ignore_case"] = ignore_case
    elif check == "match":
        fields_known("", config, ("check", "mode"))
        mode = config.get("mode", "normalised")
        if mode not in ("exact", "normalised"):
            raise _fail("mode", "mode must be 'exact' or 'normalised'.")
        out["mode"] = mode
    elif check == "length":
        fields_known("", config, ("check", "unit", "min", "max"))
        unit = config.get("unit", "chars")
        if unit not in ("chars", "words"):
            raise _fail("unit", "unit must be 'chars' or 'words'.")
        lo = integer_in_range("min", config.get("min"), lo=0, hi=10**9)
        hi = integer_in_range("max", config.get("max"), lo=0, hi=10**9)
        if lo is None and hi is None:
            raise _fail("min", "a length check needs min and/or max.")
        if lo is not None and hi is not None and lo > hi:
            raise _fail("min", "min must not exceed max.")
        out.update({"unit": unit, "min": lo, "max": hi})
    else:
        fields_known("", config, ("check",))
    refuse_secrets(out)
    _json_safe(out)
    return out


def imported_config_validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Imported judges run nothing; their config only describes where ratings came from."""
    fields_known("", config, ("source", "description", "model", "model_family"))
    out = {k: config[k] for k in sorted(config)}
    for key, value in out.items():
        if not isinstance(value, str) or len(value) > 2000:
            raise _fail(key, f"{key} must be a string of at most 2000 characters.")
    refuse_secrets(out)
    return out


def config_validate(
    config: Any, *, kind: str | None, allowed_base_urls: Iterable[str],
    allowed_key_env: Iterable[str] = DEFAULT_KEY_ENV_ALLOWED,
    reserved_key_env: Iterable[str] = RESERVED_KEY_ENV, allow_private_base_urls: bool = False,
    resolve: Resolver | None = None,
) -> dict[str, Any]:
    """Dispatch on the judge kind ("llm" | "programmatic" | "imported"; None: infer).

    ``simulated`` (every kind; true or false, default false) records that the version's
    verdicts are simulated — the simulated provider, the demo seed's judge — so that every
    report stamps them simulated (`JudgeVersion.simulated`; never guessed from a name). It
    enters the canonical form, and therefore the content hash, only when true: flagging a
    config makes a new version, and the hashes of unflagged configs stay what they were."""
    if not isinstance(config, Mapping):
        raise _fail("config", "config must be a JSON object.")
    simulated = config.get("simulated", False)
    if not isinstance(simulated, bool):
        raise _fail("simulated", "simulated must be true or false (true: the verdicts are "
                                 "simulated, and every report says so).")
    rest = {k: v for k, v in config.items() if k != "simulated"}
    if kind is None:
        kind = "programmatic" if "check" in rest else "llm"
    if kind == "llm":
        canonical = llm_config_validate(
            rest, allowed_base_urls=allowed_base_urls, allowed_key_env=allowed_key_env,
            reserved_key_env=reserved_key_env, allow_private_base_urls=allow_private_base_urls,
            resolve=resolve)
    elif kind == "programmatic":
        canonical = programmatic_config_validate(rest)
    elif kind == "imported":
        canonical = imported_config_validate(rest)
    else:
        raise _fail("kind", f"unknown judge kind {kind!r}.")
    if simulated:
        canonical["simulated"] = True
    return canonical


def config_simulated(config: Mapping[str, Any] | None) -> bool:
    """Whether a canonical config records simulated verdicts (`config_validate`)."""
    return (config or {}).get("simulated") is True
