"""Judge prompts: safe template substitution, delimited untrusted text, provider requests.

Templates use `{name}` placeholders from a fixed set, substituted by one regular-expression
pass: nothing is evaluated (no attribute access, no format specs, no recursion: a value that
itself contains `{output}` stays literal). Other braces (JSON examples) are left alone;
`{{name}}` gives a literal `{name}`.

Untrusted text (the item's input, context and reference, and the outputs under judgement) is
always wrapped in a block

    <<<OUTPUT 3f9c0e1d2a7b4c65>>>
    ...
    <<<END OUTPUT 3f9c0e1d2a7b4c65>>>

whose nonce is an HMAC of (judge version hash, subject): deterministic, so the preview shows the
exact request and a re-run sends the same bytes, but not guessable by whoever wrote the output.
Inside the blocks every run of three or more angle brackets (and look-alikes) is neutralised,
so no text can open or close a block. See docs/judges.md for what this does and does not
protect against.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from studies.criteria import (
    criterion_allowed_values,
    criterion_value_labels,
    interval_bounds,
    number_text,
)

from .config import config_hash
from .network import JudgeNetworkPolicy
from .providers import ChatMessage, ProviderConfigError, ProviderRequest, TransientProviderError
from .templates import DEFAULT_SYSTEM_PROMPTS, DEFAULT_USER_PROMPTS, TOKEN_RE

# The template rules live in judges/templates.py (judge configs check templates with them);
# they are named here too, for callers that render and check in one place.
from .templates import PLACEHOLDERS as PLACEHOLDERS
from .templates import TRUSTED_PLACEHOLDERS as TRUSTED_PLACEHOLDERS
from .templates import UNTRUSTED_PLACEHOLDERS as UNTRUSTED_PLACEHOLDERS
from .templates import placeholders_in as placeholders_in
from .templates import template_validate as template_validate

BLOCK_NAMES = {
    "input": "INPUT", "context": "CONTEXT", "reference": "REFERENCE", "output": "OUTPUT",
    "output_a": "OUTPUT A", "output_b": "OUTPUT B",
}

# Three or more '<' or '>' (ASCII or look-alikes) could forge a delimiter; spaced out they
# cannot, and stay readable.
_LT = "<\uff1c\ufe64\u2039\u276e\u27e8\u3008\u2329"
_GT = ">\uff1e\ufe65\u203a\u276f\u27e9\u3009\u232a"
_LT_RUN_RE = re.compile(f"[{_LT}]{{3,}}")
_GT_RUN_RE = re.compile(f"[{_GT}]{{3,}}")


@dataclass(frozen=True)
class SubjectContext:
    """Everything a prompt may show; built from the ORM by `subject_context_for`."""

    item_input: str
    item_context: str
    item_reference: str
    output_text: str | None  # single-output criteria
    output_a_text: str | None  # pairwise, ALREADY in presentation order
    output_b_text: str | None
    criterion_key: str
    criterion_name: str
    criterion_guidance: str
    criterion_scale: str
    scale_points: tuple[tuple[str, str], ...]  # (value, label)
    production_prompt: str
    # What the delimiter nonce is derived from, e.g. "output:17" or "comparison:4:ba".
    subject_key: str = ""
    # Interval criteria: the (min, max) of a score (scale_points is then empty).
    scale_range: tuple[float, float] | None = None


# --- templates -----------------------------------------------------------------------------




def _compile(template: str) -> tuple[tuple[str, bool], ...]:
    """The template as (literal text, False) and (placeholder name, True) parts, in order.

    `{{`/`}}` become literal braces here, so rendering is a join: no regular expression runs
    per call. `substitute` and `PromptRenderer` share it; the result is cached per template.
    """
    cached = _COMPILED.get(template)
    if cached is not None:
        return cached
    parts: list[tuple[str, bool]] = []
    literal: list[str] = []
    pos = 0
    for match in TOKEN_RE.finditer(template):
        literal.append(template[pos:match.start()])
        pos = match.end()
        token = match.group(0)
        if token in ("{{", "}}"):
            literal.append(token[0])
            continue
        parts.append(("".join(literal), False))
        literal = []
        parts.append((match.group(1), True))
    literal.append(template[pos:])
    parts.append(("".join(literal), False))
    compiled = tuple(p for p in parts if p[1] or p[0])
    if len(_COMPILED) < 1024:  # templates come from judge configs: few, but never unbounded
        _COMPILED[template] = compiled
    return compiled


_COMPILED: dict[str, tuple[tuple[str, bool], ...]] = {}


def _render(parts: tuple[tuple[str, bool], ...], values: Mapping[str, str]) -> str:
    out = []
    for text, is_name in parts:
        if is_name:
            value = values.get(text)
            if value is None:
                raise ValueError(f"unknown placeholder {{{text}}}")
            out.append(value)
        else:
            out.append(text)
    return "".join(out)


def substitute(template: str, values: Mapping[str, str]) -> str:
    """One pass over the template; values are inserted verbatim and never re-scanned."""
    return _render(_compile(template), values)


def neutralise(text: str) -> str:
    """Make delimiter-like runs of angle brackets inert (`<<<` becomes `< < <`)."""
    text = _LT_RUN_RE.sub(lambda m: " ".join("<" * len(m.group(0))), text)
    return _GT_RUN_RE.sub(lambda m: " ".join(">" * len(m.group(0))), text)


def block(name: str, text: str, nonce: str) -> str:
    label = BLOCK_NAMES[name]
    return f"<<<{label} {nonce}>>>\n{neutralise(text)}\n<<<END {label} {nonce}>>>"


def delimiter_nonce(*, version_hash: str, subject_key: str) -> str:
    """16 hex digits of HMAC-SHA256(SECRET_KEY, version hash | subject)."""
    return _nonce_mac(version_hash).nonce(subject_key)


class _NonceMac:
    """The HMAC state after the message's fixed prefix, copied per subject: one judge version
    signs thousands of subjects, and the key schedule and prefix are the same every time."""

    def __init__(self, state: hmac.HMAC) -> None:
        self._state = state

    def nonce(self, subject_key: str) -> str:
        mac = self._state.copy()
        mac.update(subject_key.encode())
        return mac.hexdigest()[:16]


def _nonce_mac(version_hash: str) -> _NonceMac:
    from django.conf import settings

    key = str(settings.SECRET_KEY).encode()
    prefix = f"reviewhub-judge-delimiter|{version_hash}|".encode()
    return _NonceMac(hmac.new(key, prefix, hashlib.sha256))



def scale_text(
    scale: str, points: tuple[tuple[str, str], ...],
    scale_range: tuple[float, float] | None = None,
) -> str:
    """The `{scale}` text; its last line lists the allowed values (interval: the range)."""
    if scale == "interval" and scale_range is not None:
        lo, hi = (number_text(x) for x in scale_range)
        return (f"A score from {lo} (worst) to {hi} (best); any number in that range, "
                f"decimals allowed (e.g. 3.5).\nAllowed values: a number from {lo} to {hi}")
    if scale == "binary":
        head = ('"pass" if the response meets the criterion, "fail" if it does not.')
        values = ["pass", "fail"]
    elif scale == "pairwise":
        head = ('"A" if Response A is better on this criterion, "B" if Response B is better, '
                '"tie" if neither is better.')
        values = ["A", "B", "tie"]
    elif scale == "ordinal":
        values = [v for v, _ in points]
        lines = [f"{v} = {label}" if label and label != v else v for v, label in points]
        head = (f"An integer rating from {values[0]} to {values[-1]}:\n" if values else "") + (
            "\n".join(lines))
    else:
        values = [v for v, _ in points]
        lines = [f"- {v}: {label}" if label and label != v else f"- {v}" for v, label in points]
        head = "Exactly one of these labels:\n" + "\n".join(lines)
    return f"{head}\nAllowed values: {', '.join(values)}"


def verdict_schema(
    allowed_values: list[str], scale_range: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The JSON schema of the answer (strict-mode compatible: all required, no extras); an
    interval criterion's verdict is a number (its range is stated in the prompt and checked by
    the parser: strict mode does not take every provider's minimum / maximum)."""
    verdict: dict[str, Any] = (
        {"type": "number"}
        if scale_range is not None
        else {"type": "string", "enum": list(allowed_values)}
    )
    return {
        "type": "object",
        "properties": {
            "verdict": verdict,
            "rationale": {"type": "string"},
        },
        "required": ["verdict", "rationale"],
        "additionalProperties": False,
    }


# --- rendering -----------------------------------------------------------------------------


class PromptRenderer:
    """Renders the (system, user) messages of one (canonical) judge config for any subject.

    What depends on the config alone (its hash, the HMAC state for the delimiter nonces, the
    compiled templates per scale) is computed once; a judge drain renders thousands of
    subjects under one config, and rehashing it per subject was most of the request-building
    time. The criterion's trusted texts are cached per criterion.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self._mac = _nonce_mac(config_hash(config))
        self._templates: dict[str, tuple[tuple[tuple[str, bool], ...], ...]] = {}
        self._trusted: dict[tuple[Any, ...], dict[str, str]] = {}
        self._blocks: dict[str, tuple[str, ...]] = {}

    def _compiled(self, scale: str) -> tuple[tuple[tuple[str, bool], ...], ...]:
        # Interval criteria are single-output criteria graded on a scale: they use the ordinal
        # prompts (whose {scale} text then states the range), so that adding the scale left
        # every judge config, and so every judge version's hash, as it was.
        scale = "ordinal" if scale == "interval" else scale
        compiled = self._templates.get(scale)
        if compiled is None:
            config = self.config
            system_t = config.get("system_prompt") or DEFAULT_SYSTEM_PROMPTS
            user_t = config.get("user_prompt") or DEFAULT_USER_PROMPTS
            system = system_t.get(scale) if isinstance(system_t, Mapping) else system_t
            user = user_t.get(scale) if isinstance(user_t, Mapping) else user_t
            compiled = self._templates[scale] = (
                _compile(str(system or DEFAULT_SYSTEM_PROMPTS[scale])),
                _compile(str(user or DEFAULT_USER_PROMPTS[scale])),
            )
        return compiled

    def _block_names(self, scale: str, parts: tuple[tuple[str, bool], ...]) -> tuple[str, ...]:
        """The placeholders of the scale's templates that may name a subject's text, once
        each, in order (looked up once per scale)."""
        names = self._blocks.get(scale)
        if names is None:
            names = self._blocks[scale] = tuple(dict.fromkeys(
                name for name, is_name in parts if is_name and name in BLOCK_NAMES))
        return names

    def _trusted_values(self, ctx: SubjectContext) -> dict[str, str]:
        key = (ctx.criterion_key, ctx.criterion_name, ctx.criterion_guidance,
               ctx.criterion_scale, ctx.scale_points, ctx.production_prompt, ctx.scale_range)
        values = self._trusted.get(key)
        if values is None:
            values = self._trusted[key] = {
                "criterion_name": ctx.criterion_name or ctx.criterion_key,
                "criterion_guidance": ctx.criterion_guidance or "(none)",
                "scale": scale_text(ctx.criterion_scale, ctx.scale_points, ctx.scale_range),
                "production_prompt": ctx.production_prompt or "(not recorded)",
            }
        return values

    def render(self, ctx: SubjectContext) -> tuple[ChatMessage, ...]:
        system, user = self.render_texts(
            ctx.criterion_scale, self._trusted_values(ctx), ctx.subject_key,
            untrusted_values(ctx.item_input, ctx.item_context, ctx.item_reference,
                             ctx.output_text, ctx.output_a_text, ctx.output_b_text))
        return (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))

    def trusted_values(self, ctx: SubjectContext) -> Mapping[str, str]:
        """The values of the criterion's own (trusted) placeholders: the same for every
        subject graded on this criterion in one study."""
        return self._trusted_values(ctx)

    def render_texts(self, scale: str, trusted: Mapping[str, str], subject_key: str,
                     untrusted: Mapping[str, str]) -> tuple[str, str]:
        """The (system, user) texts: what `render` gives, from the criterion's trusted
        values (`trusted_values`, kept by a caller rendering many subjects) and one subject's
        key and texts (`untrusted_values`)."""
        system_parts, user_parts = self._compiled(scale)
        nonce = self._mac.nonce(subject_key)
        values = dict(trusted)
        # Only the blocks the templates use are built (neutralising is the costly part).
        for name in self._block_names(scale, system_parts + user_parts):
            if name in untrusted and name not in values:
                values[name] = block(name, untrusted[name], nonce)
        try:
            return _render(system_parts, values), _render(user_parts, values)
        except ValueError as exc:  # a stored template with a bad placeholder: refuse, do not guess
            raise ProviderConfigError(f"prompt template: {exc}") from None


class RenderPlan:
    """`PromptRenderer.render_texts` for one criterion's trusted values, with the templates'
    literal text and those values baked into two `str.format` templates whose only fields
    are the subject's blocks: per subject, the nonce, the blocks and two `format_map` calls.
    """

    def __init__(self, renderer: PromptRenderer, scale: str,
                 trusted: Mapping[str, str]) -> None:
        self._mac = renderer._mac
        system_parts, user_parts = renderer._compiled(scale)
        self._names = renderer._block_names(scale, system_parts + user_parts)
        self._system = self._baked(system_parts, trusted)
        self._user = self._baked(user_parts, trusted)

    @staticmethod
    def _baked(parts: tuple[tuple[str, bool], ...], trusted: Mapping[str, str]) -> str:
        out = []
        for text, is_name in parts:
            if not is_name:
                out.append(_format_literal(text))
            elif text in trusted:
                out.append(_format_literal(trusted[text]))
            elif text in BLOCK_NAMES:
                out.append("{" + text + "}")
            else:  # what `_render` raises (for every subject) on a bad stored template
                raise ProviderConfigError(f"prompt template: unknown placeholder {{{text}}}")
        return "".join(out)

    def render(self, subject_key: str, untrusted: Mapping[str, str]) -> tuple[str, str]:
        """The (system, user) texts `render_texts` gives for this subject."""
        nonce = self._mac.nonce(subject_key)
        blocks = {name: block(name, untrusted[name], nonce) for name in self._names}
        return self._system.format_map(blocks), self._user.format_map(blocks)


def _format_literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def untrusted_values(item_input: str, item_context: str, item_reference: str,
                     output_text: str | None, output_a_text: str | None,
                     output_b_text: str | None) -> dict[str, str]:
    """A subject's texts by placeholder name (each shown inside its delimited block)."""
    return {"input": item_input, "context": item_context, "reference": item_reference,
            "output": output_text or "", "output_a": output_a_text or "",
            "output_b": output_b_text or ""}


def prompt_render(*, config: Mapping[str, Any], ctx: SubjectContext) -> tuple[ChatMessage, ...]:
    """The (system, user) messages for this subject under this (canonical) config."""
    return PromptRenderer(config).render(ctx)


def api_key_resolve(config: Mapping[str, Any]) -> str | None:
    """The API key from the environment variable the config names (None: no auth header)."""
    name = config.get("api_key_env")
    if not name:
        return None
    # Checked again here, where the environment is read: a config stored before the operator's
    # allow-lists existed (or narrowed) must not send DJANGO_SECRET_KEY as a bearer token, and
    # a key only ever goes to a listed base URL.
    refusal = JudgeNetworkPolicy.from_settings().key_send_refusal(
        str(name), base_url=str(config.get("base_url", "")))
    if refusal is not None:
        raise ProviderConfigError(refusal)
    value = os.environ.get(str(name), "")
    if not value:
        raise ProviderConfigError(
            f"environment variable {name} (the judge's api_key_env) is not set in the worker "
            "environment"
        )
    return value


def _allowed_values(ctx: SubjectContext) -> list[str]:
    if ctx.criterion_scale == "binary":
        return ["pass", "fail"]
    if ctx.criterion_scale == "pairwise":
        return ["A", "B", "tie"]
    return [v for v, _ in ctx.scale_points]


def provider_request_for(
    *, config: Mapping[str, Any], ctx: SubjectContext, resolve_key: bool = True
) -> ProviderRequest:
    """The `ProviderRequest` for one call. Raises ProviderConfigError when the key's env var
    is unset, the base URL or the key variable is not (or no longer) allowed by the operator's
    allow-lists (see judges/config.py); TransientProviderError when a private-network host
    does not resolve right now.

    `resolve_key=False` builds the request without reading the environment (the preview).
    """
    base_url = str(config.get("base_url", ""))
    policy = JudgeNetworkPolicy.from_settings()
    # The host is resolved again here: a private-network endpoint admitted at validation may
    # have moved (and a listed one needs no lookup).
    access = policy.base_url_access(base_url)
    if access.kind == "refused":
        if access.transient:
            raise TransientProviderError(access.reason)
        raise ProviderConfigError(access.reason)
    if config.get("api_key_env"):  # also for the preview, which reads no key
        refusal = policy.key_send_refusal(str(config["api_key_env"]), base_url=base_url,
                                          listed=access.listed)
        if refusal is not None:
            raise ProviderConfigError(refusal)
    params = config.get("parameters") or {}
    schema = None
    if config.get("response_format", "json_schema") == "json_schema":
        schema = {"name": "verdict",
                  "schema": verdict_schema(_allowed_values(ctx), ctx.scale_range),
                  "strict": True}
    extra = dict(config.get("extra_body") or {})
    if params.get("top_p") is not None:
        extra["top_p"] = params["top_p"]
    return ProviderRequest(
        provider=str(config.get("provider")),
        base_url=base_url,
        model=str(config.get("model")),
        api_key=api_key_resolve(config) if resolve_key else None,
        messages=prompt_render(config=config, ctx=ctx),
        temperature=params.get("temperature"),
        max_tokens=params.get("max_tokens"),
        seed=params.get("seed"),
        response_format=schema,
        logprobs=bool(config.get("logprobs", False)),
        top_logprobs=config.get("top_logprobs"),
        timeout_s=float(config.get("timeout_s") or 60.0),
        extra=extra,
    )


# --- ORM → context ------------------------------------------------------------------------

# Keys of Study.run_conditions that may hold the production prompt, in order of preference.
PRODUCTION_PROMPT_KEYS = ("production_prompt", "prompt_template", "prompt", "system_prompt")


def production_prompt_of(run_conditions: Any) -> str:
    if not isinstance(run_conditions, Mapping):
        return ""
    for key in PRODUCTION_PROMPT_KEYS:
        value = run_conditions.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def subject_context_for(
    *, criterion: Any, output: Any = None, comparison: Any = None, order: str = ""
) -> SubjectContext:
    """Build the context for one subject (the only ORM-reading helper in this module).

    For a comparison, `order` "ba" presents output_b first: the prompt's "A" is then the
    comparison's B, and the caller maps the verdict back.
    """
    item, study, out_text, a_text, b_text, subject_key = subject_of(
        output=output, comparison=comparison, order=order)
    labels = criterion_value_labels(criterion)
    points = tuple((v, labels.get(v, v)) for v in criterion_allowed_values(criterion))
    return SubjectContext(
        item_input=item.input,
        item_context=item.context,
        item_reference=item.reference,
        output_text=out_text,
        output_a_text=a_text,
        output_b_text=b_text,
        criterion_key=criterion.key,
        criterion_name=criterion.name,
        criterion_guidance=criterion.guidance,
        criterion_scale=criterion.scale,
        scale_points=points,
        production_prompt=production_prompt_of(study.run_conditions),
        subject_key=subject_key,
        scale_range=interval_bounds(criterion) if criterion.scale == "interval" else None,
    )


def subject_of(
    *, output: Any = None, comparison: Any = None, order: str = ""
) -> tuple[Any, Any, str | None, str | None, str | None, str]:
    """(item, study, output text, first text, second text, subject key) of one subject, the
    comparison's outputs in presentation order (see `subject_context_for`)."""
    if (output is None) == (comparison is None):
        raise ValueError("exactly one of output and comparison is needed")
    if comparison is not None:
        first, second = comparison.output_a, comparison.output_b
        if order == "ba":
            first, second = second, first
        elif order not in ("", "ab"):
            raise ValueError(f"order must be 'ab' or 'ba', not {order!r}")
        return (comparison.item, comparison.study, None, first.text, second.text,
                f"comparison:{comparison.pk}:{order or 'ab'}")
    return output.item, output.study, output.text, None, None, f"output:{output.pk}"
