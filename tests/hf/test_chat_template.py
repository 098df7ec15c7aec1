#!/usr/bin/python3
"""engine/text/chat_template.c against jinja2, as transformers 4.36 renders chat
templates (PreTrainedTokenizerBase._compile_jinja_template: an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, and
raise_exception): the templates of ChatML/Qwen, Llama 3, Zephyr/TinyLlama,
Llama 2, Mistral and Gemma-style ones, over conversations with and without
a system message, odd whitespace, several turns, with and without the
generation prompt. Every rendering must be byte-identical; where jinja2
raises (raise_exception), zoffload must refuse with the same message.

Usage: tests/hf/test_chat_template.py ZOFFLOAD (finds the driver
tests/test-engine-chat-template beside it); ctest -R hf-chat-template.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: jinja2 not installed (apt-get install python3-jinja2, scripts/install-deps.sh --reference)")
    sys.exit(77)

TEMPLATES = {
    "chatml-qwen": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",  # noqa: E501
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",  # noqa: E501
    "zephyr-tinyllama": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",  # noqa: E501
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",  # noqa: E501
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",  # noqa: E501
    "gemma-like": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",  # noqa: E501
    "indented-blocks": "{% for m in messages %}\n    {% if m.role == 'user' %}\n  U: {{ m.content }}\n    {%- else %}\n  A: {{ m.content | upper }}{{ ' (' ~ loop.index ~ '/' ~ loop.length ~ ')' if loop.last else '' }}\n    {% endif %}\n{% endfor %}\n{#- a comment -#}\n{% if add_generation_prompt and messages | length > 1 and 'x' not in messages[-1]['content'] %}A:{% endif %}",  # noqa: E501
    "arithmetic": "{{ (-7) // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 // -2 }} {{ messages | length * 3 - 1 }} {{ messages[1:] | length }} {{ messages[-1]['content'][:3] }}{{ 'yes' if messages[0].role in ['user', 'system'] else 'no' }}{% for m in messages %}{{ loop.revindex0 }}{% endfor %}",  # noqa: E501
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": " Hello! "}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?\n"},
     {"role": "assistant", "content": "6\n\n"}],
    [{"role": "user", "content": "  lead and trail  "}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "x marks, ünïcödé ✓"}, {"role": "assistant", "content": "y"},
     {"role": "user", "content": "z"}],
]


def reference(template, msgs, gen, bos, eos):
    def raise_exception(message):
        raise TemplateError(message)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=msgs, add_generation_prompt=gen, bos_token=bos,
                                                eos_token=eos)
    except TemplateError as e:
        return {"error": str(e)}


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    driver = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "tests", "test-engine-chat-template")
    if not os.path.exists(driver):
        print(f"FAIL no driver {driver} (build the tests)")
        return 1
    cases, refs, names = [], [], []
    for name, t in TEMPLATES.items():
        for i, msgs in enumerate(CONVERSATIONS):
            for gen in (False, True):
                cases.append({"template": t, "messages": msgs, "add_generation_prompt": gen, "bos_token": "<s>",
                              "eos_token": "</s>"})
                refs.append(reference(t, msgs, gen, "<s>", "</s>"))
                names.append(f"{name} conversation {i} add_generation_prompt={gen}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
        path = f.name
    try:
        out = subprocess.run([driver, path], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    got = json.loads(out)
    bad = 0
    for name, g, r in zip(names, got, refs):
        if isinstance(r, dict):
            ok = isinstance(g, dict) and r["error"] in g["error"]
        else:
            ok = g == r
        if not ok:
            bad += 1
            print(f"FAIL {name}\n  zoffload {g!r}\n  jinja2   {r!r}")
    n_err = sum(isinstance(r, dict) for r in refs)
    print(f"{len(cases) - bad} of {len(cases)} renderings equal jinja2's ({n_err} of them raise_exception refusals)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
