"""Llama-3.1 chat-template references: transformers' own apply_chat_template (its Jinja environment, its
`tojson` filter) renders Meta's Llama-3.1-8B-Instruct chat template (tests/data/chat/llama31_chat_template.jinja)
for a few conversations, with and without a date and custom tools, and the shared llama3 fixture tokenizer
encodes each rendering. Imported by generate.py (target "chat31"); read by tests/test_models_chat_template.cpp.
"""

import hashlib
import json
from pathlib import Path

from transformers import AutoTokenizer

TEMPLATE = Path("tests") / "data" / "chat" / "llama31_chat_template.jinja"
TOKENIZER = Path("tokenizers") / "llama3"  # under the shared fixtures

# Custom tools, as a caller passes them to apply_chat_template(tools=...). The second stresses the template's
# `tojson(indent=4)`: key order, nesting, empty containers, non-ASCII text, escapes, integers and floats
# (Python's float repr: positional up to 1e16, exponent from there and below 1e-4).
TEMPERATURE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_temperature",
        "description": "Get the current temperature at a location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The location to get the temperature for, in the format \"City, Country\"",
                },
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "The unit to return the temperature in.",
                },
            },
            "required": ["location", "unit"],
        },
        "return": {"type": "number", "description": "The current temperature in the given unit, as a float."},
    },
}
EDGE_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_städte",
        "description": "Zürich, 東京 and 🚀: a tab\there, a backslash \\ and a control \u0001 char.",
        "parameters": {
            "type": "object",
            "properties": {
                "z_last_key_first": {"type": "integer", "minimum": -3, "maximum": 9007199254740993},
                "a_ratio": {"type": "number", "default": 0.5, "examples": [1e-05, 0.0001, 2.5e-07, -0.0, 1e15,
                                                                            1e16, 123456789.125, 3.0]},
                "flags": {"type": "array", "items": {}, "default": [], "nested": [[True, False, None], []]},
            },
            "required": [],
        },
    },
}

# (name, messages, add_generation_prompt, tools, extra keyword arguments of apply_chat_template)
CASES = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}], True, None, {}),
    ("system_user", [{"role": "system", "content": "  You are a concise assistant.\n"},
                     {"role": "user", "content": "Explain what a tokenizer does. "}], True, None, {}),
    ("user_assistant_user", [{"role": "user", "content": "Hi!"},
                             {"role": "assistant", "content": "Hello! How can I help you today?"},
                             {"role": "user", "content": "Name three primes.\n\n"}], True, None, {}),
    ("date_string", [{"role": "system", "content": "Answer briefly."},
                     {"role": "user", "content": "What day is it?"}], True, None, {"date_string": "15 Mar 2025"}),
    ("tools_in_user_message", [{"role": "system", "content": "You are a weather bot."},
                               {"role": "user", "content": " What is the temperature in Paris right now? "}],
     True, [TEMPERATURE_TOOL, EDGE_TOOL], {}),
    ("tools_no_system_with_date", [{"role": "user", "content": "Temperature in Tokyo, in celsius?"}], True,
     [TEMPERATURE_TOOL], {"date_string": "01 Jan 2026", "tools_in_user_message": True}),
    ("tools_in_system_message", [{"role": "system", "content": "You are a weather bot."},
                                 {"role": "user", "content": "And in Oslo?"}], True,
     [TEMPERATURE_TOOL, EDGE_TOOL], {"tools_in_user_message": False}),
    ("tool_result", [{"role": "user", "content": "Temperature in Paris?"},
                     {"role": "assistant", "content": "Let me check."},
                     {"role": "tool", "content": "22.5 °C, \"sunny\"\nwind\t3 m/s \\ gusts"},
                     {"role": "user", "content": "Thanks, and tomorrow?"}], True, [TEMPERATURE_TOOL], {}),
    ("empty_tool_list", [{"role": "user", "content": "No tools today."}], True, [], {}),
    ("no_generation_prompt", [{"role": "system", "content": "\u3000\x1cBe kind.\t"},
                              {"role": "user", "content": "\u2028Hi\u00a0"},
                              {"role": "assistant", "content": "Hello.\n"}], False, None, {}),
]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def reference(repo, fixtures, generator):
    template_path = Path(repo) / TEMPLATE
    template = template_path.read_text()
    tok_dir = Path(fixtures) / TOKENIZER
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.chat_template = template
    cases = []
    for name, messages, add_generation_prompt, tools, kwargs in CASES:
        rendered = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                           add_generation_prompt=add_generation_prompt, **kwargs)
        ids = tok.encode(rendered, add_special_tokens=False)
        direct = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                         add_generation_prompt=add_generation_prompt, **kwargs)["input_ids"]
        assert list(direct) == ids, f"{name}: apply_chat_template(tokenize=True) differs from encode(rendered)"
        assert "Cutting Knowledge Date: December 2023\nToday Date: " in rendered, name
        case = {
            "name": name,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "template_kwargs": kwargs,
            # The tools as JSON texts (key order as written), the form the C++ API takes; null: no tools.
            "tools_json": None if tools is None else [json.dumps(t, ensure_ascii=False) for t in tools],
            "rendered": rendered,
            "ids": ids,
        }
        cases.append(case)
    # The template raises when tools go into a first user message that does not exist.
    try:
        tok.apply_chat_template([{"role": "system", "content": "S"}], tools=[TEMPERATURE_TOOL], tokenize=False)
        raise AssertionError("the template accepted tools without a user message")
    except AssertionError:
        raise
    except Exception as e:  # jinja2's TemplateError
        no_user_error = str(e)
    return {
        "generator": generator,
        "template": str(TEMPLATE),
        "template_sha256": sha256(template_path),
        "tokenizer": "fixtures/" + str(TOKENIZER / "tokenizer.json"),
        "tokenizer_sha256": sha256(tok_dir / "tokenizer.json"),
        "renderer": "transformers PreTrainedTokenizerBase.apply_chat_template (its Jinja environment); ids: "
                    "encode(rendered, add_special_tokens=False), equal to apply_chat_template(tokenize=True)",
        "bos_token": tok.bos_token,
        "tools_without_user_message_error": no_user_error,
        "cases": cases,
    }
