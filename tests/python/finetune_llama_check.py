#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""finetune_llama end to end on a tiny Llama model this script writes in Hugging Face's layout.

  finetune_llama_check.py fixture --out DIR
      DIR/model: config.json, model.safetensors (random weights, fp32), tokenizer.json (a byte-level
      BPE whose merges are learned here from the data), tokenizer_config.json with a chat template;
      DIR/*.jsonl: the data (chat, text and prompt/completion records) and bad data
  finetune_llama_check.py e2e --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      LoRA fine-tune at 2 ranks: the loss falls; then zeroshard-ckpt export --format peft and hf and
      zeroshard-eval: the fine-tune scores the chat data better than the base, and the checkpoint,
      the exported directory and base + adapter all give the same NLL
  finetune_llama_check.py resume --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      6 steps at 1 rank against 2 steps at 2 ranks, resumed for 2 at 4 ranks, resumed for 2 at 1
      rank (same global batch): the same sample ids at every step, losses within 1e-6
  finetune_llama_check.py qlora --fixture DIR --bin BUILD/bin --mpirun MPIRUN --clients BUILD/clients/node_modules
      QLoRA (LoRA over the base stored in NF4) at 2 ranks: the loss falls and the held-out NLL ends
      within 5% of LoRA over the fp32 base's; the merged GGUF export gives llama.cpp the NLL
      zeroshard-eval prints for the checkpoint (1e-5 relative) and the same greedy continuation
  finetune_llama_check.py shards --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      the data made into token shards once by zeroshard-data: the run from the shard folder equals
      the run from the JSONL (losses and samples); shards of another tokenizer are refused
  finetune_llama_check.py errors --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      bad input, each refused with its exact message
  finetune_llama_check.py stop --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      SIGUSR1 to mpirun during a 2-rank run: a checkpoint of the step every rank stopped after,
      exit status 138; --resume auto then gives the uninterrupted run's losses and samples

  finetune_llama_check.py train --fixture DIR --bin BUILD/bin --mpirun MPIRUN
      zeroshard-train on the model directory: at 1 and 2 ranks, 1 and 2 micro-batches, its step losses
      equal finetune_llama's (the mean over the global batch's trained tokens); QLoRA at
      2 ranks on the chat data lowers the held-out loss, samples text, stores the base in NF4, exports
      a PEFT adapter, and its merged Hugging Face export scores as the checkpoint in zeroshard-eval

Each prints CHECK PASSED or CHECK FAILED (with what differed) as its last line.
"""
import argparse
import collections
import json
import math
import os
import random
import re
import shutil
import struct
import signal
import subprocess
import sys

import torch

SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
MODEL_VOCAB = 320          # config.json's vocab_size
MERGES = MODEL_VOCAB - 256 - len(SPECIALS)
RESERVED = "<|reserved|>"  # a tokenizer token at id MODEL_VOCAB: outside the model's vocabulary
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                 "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + "
                 "'<|eot_id|>' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
FAILED = []


def check(ok, what):
    print(("ok:     " if ok else "FAILED: ") + what)
    if not ok:
        FAILED.append(what)


def finish():
    print("CHECK FAILED: " + "; ".join(FAILED) if FAILED else "CHECK PASSED")
    sys.exit(1 if FAILED else 0)


# ---- the fixture ----

def byte_symbols():
    """GPT-2's byte-level alphabet: byte -> the printable character that stands for it."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def conversations(rng, n):
    out = []
    for i in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        msgs = []
        if i % 3 == 0:
            msgs.append({"role": "system", "content": "You add numbers."})
        msgs.append({"role": "user", "content": "What is %d plus %d?" % (a, b)})
        msgs.append({"role": "assistant", "content": "%d plus %d is %d." % (a, b, a + b)})
        if i % 4 == 1:
            msgs.append({"role": "user", "content": "And %d plus %d?" % (b, a)})
            msgs.append({"role": "assistant", "content": "Also %d." % (a + b)})
        out.append({"messages": msgs})
    return out


def render(messages):
    return SPECIALS[0] + "".join("%s%s%s\n\n%s%s" % (SPECIALS[1], m["role"], SPECIALS[2], m["content"], SPECIALS[3])
                                 for m in messages)


def learn_merges(texts, symbols, count):
    """Byte-level BPE merges learned from `texts` (words split at spaces, as GPT-2's pattern roughly does)."""
    words = collections.Counter()
    for t in texts:
        for w in re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", t):
            words[tuple(symbols[b] for b in w.encode())] += 1
    merges, made = [], set(symbols.values())
    while len(made) < 256 + count:
        pairs = collections.Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        made.add(best[0] + best[1])
        merged = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


def tokenizer_json(merges, symbols):
    vocab = {symbols[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) == MODEL_VOCAB - len(SPECIALS), len(vocab)
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS + [RESERVED])]
    bos = {"SpecialToken": {"id": SPECIALS[0], "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {SPECIALS[0]: {"id": SPECIALS[0], "ids": [added[0]["id"]],
                                                            "tokens": [SPECIALS[0]]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": ["%s %s" % m for m in merges]},
    }


CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": MODEL_VOCAB,
          "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
          "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32",
          "bos_token_id": MODEL_VOCAB - 4, "eos_token_id": MODEL_VOCAB - 1}


def weights(seed):
    g = torch.Generator().manual_seed(seed)
    c = CONFIG
    h, f, hd = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd

    def normal(*shape, std=0.08):
        return torch.randn(*shape, generator=g) * std

    w = {"model.embed_tokens.weight": normal(c["vocab_size"], h, std=0.5)}
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "self_attn.q_proj.weight"] = normal(h, h, std=0.2)
        w[p + "self_attn.k_proj.weight"] = normal(kv, h, std=0.2)
        w[p + "self_attn.v_proj.weight"] = normal(kv, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, h)
        w[p + "mlp.gate_proj.weight"] = normal(f, h)
        w[p + "mlp.up_proj.weight"] = normal(f, h)
        w[p + "mlp.down_proj.weight"] = normal(h, f)
        w[p + "input_layernorm.weight"] = 1 + normal(h, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(h, std=0.1)
    w["model.norm.weight"] = 1 + normal(h, std=0.1)
    w["lm_head.weight"] = normal(c["vocab_size"], h, std=0.2)
    return w


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        data = t.to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")


def cmd_fixture(a):
    shutil.rmtree(a.out, ignore_errors=True)
    model = os.path.join(a.out, "model")
    os.makedirs(model)
    rng = random.Random(5)
    chats = conversations(rng, 96)
    symbols = byte_symbols()
    extra = ["user", "assistant", "system", "Numbers add up: and make", "Add and:",
             "the quick brown fox jumps over the lazy dog, which sleeps in the warm afternoon sun"]
    merges = learn_merges([m["content"] for c in chats for m in c["messages"]] + extra, symbols, MERGES)
    with open(os.path.join(model, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(merges, symbols), f, ensure_ascii=False)
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[3], "chat_template": CHAT_TEMPLATE}, f)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    write_safetensors(os.path.join(model, "model.safetensors"), weights(17))
    write_jsonl(os.path.join(a.out, "chat.jsonl"), chats)
    mixed = [{"text": "Numbers add up: %d and %d make %d." % (i, i + 1, 2 * i + 1)} for i in range(8)]
    mixed += [{"prompt": "Add %d and %d: " % (i, 2), "completion": "%d" % (i + 2)} for i in range(8)]
    write_jsonl(os.path.join(a.out, "mixed.jsonl"), mixed)
    write_jsonl(os.path.join(a.out, "bad_json.jsonl"), chats[:2] + ['{"messages": [{"role": "user", "content": "x"}'])
    write_jsonl(os.path.join(a.out, "bad_vocab.jsonl"), chats[:1] + [{"text": "one " + RESERVED + " two"}])
    # Text for zeroshard-eval: held-out conversations, rendered as the template renders them.
    write_jsonl(os.path.join(a.out, "eval_text.jsonl"),
                [{"text": render(c["messages"])} for c in conversations(random.Random(99), 8)])
    # The tokenizer a GGUF export embeds: the model's without the reserved token at id MODEL_VOCAB,
    # which lies outside the model's vocabulary (a GGUF's vocabulary is the model's).
    gguf_tok = os.path.join(a.out, "gguf_tokenizer")
    os.makedirs(gguf_tok)
    tok = tokenizer_json(merges, symbols)
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != RESERVED]
    with open(os.path.join(gguf_tok, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    shutil.copy(os.path.join(model, "tokenizer_config.json"), gguf_tok)
    print("wrote %s: %d merges, %d conversations" % (a.out, len(merges), len(chats)))


# ---- running the programs ----

def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        print(" ".join(args) + "\n" + p.stdout + p.stderr)
        program = next(x for x in args[1:] + [args[0]] if os.sep in x or x == args[0])
        check(False, "%s exited with %d" % (os.path.basename(program), p.returncode))
        finish()
    return p


def finetune(a, ranks, *extra):
    return run([a.mpirun, "-n", str(ranks), "--oversubscribe", os.path.join(a.bin, "finetune_llama"),
                os.path.join(a.fixture, "model"), "--data", os.path.join(a.fixture, "chat.jsonl")] + list(extra))


def steps_of(out):
    """{step: (loss, [sample ids])} from the `step N loss X samples [...] time T s` lines."""
    steps = {}
    for m in re.finditer(r"^step (\d+) loss (\S+) samples \[([0-9, ]*)\] time [0-9.]+ s$", out, re.M):
        steps[int(m.group(1))] = (float(m.group(2)), [int(x) for x in m.group(3).split(",") if x.strip()])
    return steps


def eval_nll(a, model, ids, *extra):
    p = run([a.mpirun, "-n", "2", "--oversubscribe", os.path.join(a.bin, "zeroshard-eval"), model, "--ids", ids,
             "--context", "128"] + list(extra))
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])["nll"]


def eval_ids(a, work):
    p = run([os.path.join(a.bin, "zeroshard-data"), "encode", "--tokenizer", os.path.join(a.fixture, "model"),
             "--jsonl", "--no-special-tokens", os.path.join(a.fixture, "eval_text.jsonl")])
    ids = [i for line in p.stdout.splitlines() for i in json.loads(line)]
    path = os.path.join(work, "eval_ids.json")
    with open(path, "w") as f:
        json.dump(ids, f)
    return path, ids


# ---- the checks ----

def cmd_e2e(a):
    work = os.path.join(a.fixture, "e2e")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt = os.path.join(work, "ckpt")
    p = finetune(a, 2, "--data", os.path.join(a.fixture, "mixed.jsonl"), "--seq-len", "64", "--global-batch", "8",
                 "--steps", "12", "--lr", "1e-2", "--lora-rank", "8", "--lora-alpha", "16",
                 "--lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "--ckpt-dir", ckpt)
    print(p.stdout.strip())
    steps = steps_of(p.stdout)
    losses = [steps[s][0] for s in sorted(steps)]
    check(len(losses) == 12, "12 step lines (got %d)" % len(losses))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    check(all(math.isfinite(x) for x in losses) and last < 0.8 * first,
          "the loss falls by more than 20%%: first 3 steps %.4f, last 3 %.4f" % (first, last))
    peft, hf = os.path.join(work, "peft"), os.path.join(work, "hf")
    ckpt_tool = os.path.join(a.bin, "zeroshard-ckpt")
    out = run([ckpt_tool, "export", ckpt, peft, "--format", "peft"]).stdout + \
        run([a.mpirun, "-n", "2", "--oversubscribe", ckpt_tool, "export", ckpt, hf, "--format", "hf",
                                                         "--merge-lora"]).stdout
    print(out.strip())
    adapter = json.load(open(os.path.join(peft, "adapter_config.json")))
    check(adapter.get("r") == 8 and adapter.get("lora_alpha") == 16 and
          sorted(adapter.get("target_modules", [])) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                "up_proj", "down_proj"]),
          "adapter_config.json: r 8, lora_alpha 16, the seven targets (%s)" % json.dumps(adapter))
    check(os.path.exists(os.path.join(hf, "config.json")), "the hf export has config.json")
    ids, idlist = eval_ids(a, work)
    base = eval_nll(a, os.path.join(a.fixture, "model"), ids)
    tuned = eval_nll(a, ckpt, ids)
    merged = eval_nll(a, hf, ids)
    adapted = eval_nll(a, os.path.join(a.fixture, "model"), ids, "--adapter", peft)
    print("zeroshard-eval on %d held-out chat tokens: base %.6f, fine-tuned checkpoint %.6f, exported hf %.6f, "
          "base + peft adapter %.6f" % (len(idlist), base, tuned, merged, adapted))
    check(tuned < base - 0.1, "the fine-tune scores held-out chats better than the base")
    check(abs(merged - tuned) <= 1e-5 * abs(tuned), "the exported directory scores as the checkpoint (1e-5 rel)")
    check(abs(adapted - tuned) <= 1e-4 * abs(tuned), "base + adapter scores as the checkpoint (1e-4 rel)")
    finish()


def llama_cpp(a, gguf, ids, prompt, work):
    """llama.cpp on `gguf` (tests/models/llama_cpp_nll.mjs): the mean NLL of the ids in the file `ids`,
    and the greedy continuation (16 tokens) of their first len(prompt) ids."""
    jobs, out = os.path.join(work, "jobs.json"), os.path.join(work, "llama_cpp.json")
    with open(jobs, "w") as f:
        json.dump([{"gguf": gguf, "ids": ids, "out": out, "generate": 16, "prompt_len": len(prompt)}], f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "llama_cpp_nll.mjs")
    run(["node", script, "--modules", a.clients, "--jobs", jobs])
    return json.load(open(out))


def cmd_qlora(a):
    work = os.path.join(a.fixture, "qlora")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = ["--data", os.path.join(a.fixture, "mixed.jsonl"), "--seq-len", "64", "--global-batch", "8",
              "--steps", "12", "--lr", "1e-2", "--lora-rank", "8", "--lora-alpha", "16",
              "--lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"]
    ckpt, full_ckpt = os.path.join(work, "ckpt"), os.path.join(work, "ckpt-fp32-base")
    p = finetune(a, 2, *common, "--nf4", "--ckpt-dir", ckpt)
    print(p.stdout.strip())
    steps = steps_of(p.stdout)
    losses = [steps[s][0] for s in sorted(steps)]
    check(len(losses) == 12, "12 step lines (got %d)" % len(losses))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    check(all(math.isfinite(x) for x in losses) and last < 0.8 * first,
          "the loss falls by more than 20%%: first 3 steps %.4f, last 3 %.4f" % (first, last))
    finetune(a, 2, *common, "--ckpt-dir", full_ckpt)
    ids, idlist = eval_ids(a, work)
    window = os.path.join(work, "window_ids.json")  # one window of llama.cpp's 256-token context
    with open(window, "w") as f:
        json.dump(idlist[:128], f)
    base = eval_nll(a, os.path.join(a.fixture, "model"), ids)
    qlora = eval_nll(a, ckpt, ids)
    lora = eval_nll(a, full_ckpt, ids)
    print("zeroshard-eval on %d held-out chat tokens: base %.6f, LoRA over the fp32 base %.6f, over the NF4 base "
          "%.6f" % (len(idlist), base, lora, qlora))
    check(qlora < base - 0.1, "the QLoRA fine-tune scores held-out chats better than the base")
    check(abs(qlora - lora) <= 0.05 * lora, "QLoRA ends within 5%% of LoRA over the fp32 base (%.6f vs %.6f)"
          % (qlora, lora))
    gguf = os.path.join(work, "merged.gguf")
    print(run([os.path.join(a.bin, "zeroshard-ckpt"), "export", ckpt, gguf, "--format", "gguf", "--tokenizer",
               os.path.join(a.fixture, "gguf_tokenizer")]).stdout.strip())
    ours = eval_nll(a, ckpt, window)
    theirs = llama_cpp(a, gguf, window, idlist[:8], work)
    p = run([a.mpirun, "-n", "2", "--oversubscribe", os.path.join(a.bin, "zeroshard-eval"), ckpt, "--generate", "16",
             "--prompt-ids", ",".join(str(i) for i in idlist[:8])])
    greedy = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])["generated"]
    print("the first %d held-out tokens: zeroshard-eval on the checkpoint %.8f, llama.cpp on the merged GGUF %.8f; "
          "greedy continuations of 8 of them: %s, %s" % (len(idlist[:128]), ours, theirs["nll"], greedy,
                                                         theirs["generated"]))
    check(abs(theirs["nll"] - ours) <= 1e-5 * abs(ours), "llama.cpp's mean NLL equals zeroshard's (1e-5 relative)")
    check(greedy == theirs["generated"], "llama.cpp continues the prompt as zeroshard-eval does (16 greedy tokens)")
    expect_error(a, "resuming the QLoRA checkpoint without --nf4",
                 [os.path.join(a.fixture, "model"), "--data", os.path.join(a.fixture, "chat.jsonl")] + common +
                 ["--steps", "13", "--ckpt-dir", ckpt, "--resume", "auto"],
                 "checkpoint '%s' stores frozen weights of unit '<root>' as nf4, the model stores that unit's as fp32: "
                 "resume with the storage the run was saved with (precision.frozen_linear; finetune_llama --nf4)"
                 % os.path.join(ckpt, "step-00000012"), ranks=2)
    finish()


def cmd_shards(a):
    work = os.path.join(a.fixture, "shards")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, tool = os.path.join(a.fixture, "model"), os.path.join(a.bin, "zeroshard-data")
    inputs = [os.path.join(a.fixture, "chat.jsonl"), os.path.join(a.fixture, "mixed.jsonl")]
    shards, other = os.path.join(work, "shards"), os.path.join(work, "bytes")
    print(run([tool, "shards", "--tokenizer", model, "--out", shards, "--progress", "none"] + inputs).stdout.strip())
    common = ["--seq-len", "64", "--global-batch", "8", "--steps", "4", "--lr", "1e-2", "--lora-rank", "8"]
    mpirun = [a.mpirun, "-n", "2", "--oversubscribe", os.path.join(a.bin, "finetune_llama"), model]
    from_jsonl = steps_of(finetune(a, 2, "--data", inputs[1], *common).stdout)
    from_shards = steps_of(run(mpirun + ["--data", shards] + common).stdout)
    print("from JSONL: %s\nfrom shards: %s" % (from_jsonl, from_shards))
    check(len(from_jsonl) == 4 and from_jsonl == from_shards,
          "the run from zeroshard-data's shards equals the run from the JSONL (losses and samples of 4 steps)")
    run([tool, "shards", "--tokenizer", "bytes", "--no-eos", "--out", other, "--progress", "none", inputs[1]])
    expect_error(a, "shards of another tokenizer", [model, "--data", other] + common,
                 "--data '%s': the shards were tokenized with a vocabulary of 256 ids (tokenizer 'bytes'), the "
                 "model's tokenizer has %d: make them with zeroshard-data shards --tokenizer %s"
                 % (other, MODEL_VOCAB + 1, model))
    no_eos = os.path.join(work, "no_eos")
    run([tool, "shards", "--tokenizer", model, "--no-eos", "--out", no_eos, "--progress", "none", inputs[1]])
    expect_error(a, "shards without the model's end-of-text token", [model, "--data", no_eos] + common,
                 "--data '%s': the shards end their documents with token none, the model's tokenizer with %d: make "
                 "them with zeroshard-data shards --tokenizer %s" % (no_eos, MODEL_VOCAB - 1, model))
    expect_error(a, "shards mixed with JSONL", [model, "--data", shards, "--data", inputs[0]] + common,
                 "--data '%s' is a set of token shards; give it alone (it cannot be mixed with other --data inputs)"
                 % shards)
    expect_error(a, "a folder without a manifest", [model, "--data", work] + common,
                 "'%s' holds no *_manifest.json: a set of token shards is complete once zeroshard-data shards has "
                 "written its manifest" % work)
    finish()


def cmd_resume(a):
    work = os.path.join(a.fixture, "resume")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = ["--seq-len", "32", "--global-batch", "8", "--lr", "5e-3", "--lora-rank", "4", "--seed", "3",
              "--lora-targets", "q_proj,v_proj,down_proj"]
    whole = steps_of(finetune(a, 1, *common, "--steps", "6", "--micro-batches", "2").stdout)
    ckpt = os.path.join(work, "ckpt")
    parts = {}
    for ranks, steps in ((2, 2), (4, 4), (1, 6)):
        p = finetune(a, ranks, *common, "--steps", str(steps), "--ckpt-dir", ckpt, "--save-every", "2",
                     "--resume", "auto")
        got = steps_of(p.stdout)
        print("%d ranks: steps %s" % (ranks, sorted(got)))
        parts.update(got)
    check(sorted(whole) == list(range(1, 7)) and sorted(parts) == list(range(1, 7)),
          "both runs print steps 1..6 (%s, %s)" % (sorted(whole), sorted(parts)))
    worst = 0.0
    for s in sorted(whole):
        if s not in parts:
            continue
        (lw, iw), (lp, ip) = whole[s], parts[s]
        print("step %d: uninterrupted loss %.9f, split 2 -> 4 -> 1 ranks %.9f; samples %s" % (s, lw, lp, iw))
        check(iw == ip and len(set(iw)) == 8, "step %d trains on the same 8 samples (%s vs %s)" % (s, iw, ip))
        worst = max(worst, abs(lw - lp) if math.isfinite(lw) and math.isfinite(lp) else math.inf)
    check(worst <= 1e-6, "losses within 1e-6 (largest difference %.3g)" % worst)
    finish()


def cmd_stop(a):
    """SIGUSR1 to mpirun (which forwards it to every rank) during a 2-rank run: every rank stops after
    the same step with a checkpoint and exit status 138; --resume auto continues, and every step
    after the stop has the uninterrupted run's loss and samples."""
    work = os.path.join(a.fixture, "stop")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = ["--seq-len", "32", "--global-batch", "8", "--lr", "5e-3", "--lora-rank", "4", "--seed", "5",
              "--lora-targets", "q_proj,v_proj", "--steps", "40"]
    whole = steps_of(finetune(a, 2, *common).stdout)
    ckpt = os.path.join(work, "ckpt")
    args = [a.mpirun, "-n", "2", "--oversubscribe", os.path.join(a.bin, "finetune_llama"),
            os.path.join(a.fixture, "model"), "--data", os.path.join(a.fixture, "chat.jsonl")] + common + \
        ["--ckpt-dir", ckpt, "--save-every", "1000", "--resume", "auto"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("step 2 "):
            p.send_signal(signal.SIGUSR1)
            break
    out = "".join(lines) + p.stdout.read()
    code = p.wait()
    m = re.search(r"^stopped by SIGUSR1 after step (\d+) of 40: run again", out, re.M)
    check(code == 138 and m is not None, "exit status %d (138 expected) and the stop line" % code)
    if m is None:
        print(out)
        finish()
    stopped = int(m.group(1))
    check(os.path.isdir(os.path.join(ckpt, "step-%08d" % stopped)), "a checkpoint of step %d" % stopped)
    rest = steps_of(finetune(a, 2, *common, "--ckpt-dir", ckpt, "--save-every", "1000", "--resume", "auto").stdout)
    check(sorted(rest) == list(range(stopped + 1, 41)), "the resumed run does steps %d..40 (%s)" %
          (stopped + 1, sorted(rest)[:3]))
    worst = max([abs(whole[s][0] - rest[s][0]) for s in rest] or [math.inf])
    same = all(whole[s][1] == rest[s][1] for s in rest)
    print("stopped after step %d; resumed steps %d..40: largest loss difference %.3g, same samples %s" %
          (stopped, stopped + 1, worst, same))
    check(worst <= 1e-6 and same, "the resumed steps equal the uninterrupted run's (losses within 1e-6, samples)")
    finish()


def expect_error(a, what, args, message, ranks=1):
    p = run([a.mpirun, "-n", str(ranks), "--oversubscribe", os.path.join(a.bin, "finetune_llama")] + args, False)
    check(p.returncode != 0 and message in p.stderr,
          "%s: exit %d, message %r%s" % (what, p.returncode, message,
                                         "" if message in p.stderr else " not in:\n" + p.stderr[-2000:]))


def cmd_errors(a):
    work = os.path.join(a.fixture, "errors")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(a.fixture, "model")
    bad_json = os.path.join(a.fixture, "bad_json.jsonl")
    expect_error(a, "malformed JSONL line", [model, "--data", bad_json, "--seq-len", "16"],
                 bad_json + ":3: bad JSON at column 47: syntax error while parsing array - unexpected end of input; "
                 "expected ']'")
    bad_vocab = os.path.join(a.fixture, "bad_vocab.jsonl")
    expect_error(a, "token outside the model's vocabulary", [model, "--data", bad_vocab, "--seq-len", "16"],
                 "%s:2: token id %d (%s) is outside the model's vocabulary of %d ids"
                 % (bad_vocab, MODEL_VOCAB, RESERVED, MODEL_VOCAB), ranks=2)
    expect_error(a, "a sample longer than the model's positions", [model, "--data", bad_json, "--seq-len", "300"],
                 "--seq-len 300 exceeds the model's max_position_embeddings of 256 (%s)"
                 % os.path.join(model, "config.json"))
    chat = os.path.join(a.fixture, "chat.jsonl")
    expect_error(a, "a bad number", [model, "--data", chat, "--lr", "abc"], "--lr 'abc' is not a number (usage: "
                 "mpirun -n N finetune_llama MODEL_DIR --data FILE.jsonl [OPTIONS]; finetune_llama --help lists the "
                 "options)")
    expect_error(a, "a value out of range", [model, "--data", chat, "--global-batch", "0"],
                 "--global-batch must be at least 1, got 0")
    expect_error(a, "a global batch the ranks cannot split", [model, "--data", chat, "--global-batch", "3", "--seq-len", "32"],
                 "the global batch of 3 samples does not split into 2 rank(s) x 1 micro-batch(es); use a multiple "
                 "of 2 (e.g. 2)", ranks=2)
    expect_error(a, "a missing model directory", [os.path.join(work, "no-model"), "--data", chat],
                 "model config '%s' cannot be read (no such file)" % os.path.join(work, "no-model"))
    expect_error(a, "--nf4 without LoRA", [model, "--data", chat, "--nf4"],
                 "--nf4 stores the frozen base weights in 4 bits: it needs LoRA adapters to train (--lora-rank N)")
    missing = os.path.join(work, "missing.jsonl")
    expect_error(a, "missing data file", [model, "--data", missing], "--data '%s': no such file or folder" % missing)
    ckpt = os.path.join(work, "ckpt")
    common = [model, "--data", os.path.join(a.fixture, "chat.jsonl"), "--seq-len", "32", "--ckpt-dir", ckpt]
    run([a.mpirun, "-n", "2", "--oversubscribe", os.path.join(a.bin, "finetune_llama")] + common +
        ["--global-batch", "8", "--steps", "1"])
    expect_error(a, "resume with another global batch", common + ["--global-batch", "4", "--steps", "2",
                                                                   "--resume", "auto"],
                 "' was trained with --global-batch 8, this run has --global-batch 4: resuming the data exactly "
                 "needs the same global batch", ranks=2)
    finish()


def zs_train(a, ranks, work, name, *sets):
    """zeroshard-train on the fixture's model; returns ({step: loss}, the summary record, stdout)."""
    metrics = os.path.join(work, name + ".jsonl")
    args = [a.mpirun, "-n", str(ranks), "--oversubscribe", os.path.join(a.bin, "zeroshard-train"),
            "--metrics-out", metrics, "--set", "model.path=" + os.path.join(a.fixture, "model"),
            "--set", "logging.progress=LINES"]
    for kv in sets:
        args += ["--set", kv]
    p = run(args)
    steps, summary = {}, {}
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "step" in r:
                steps[r["step"]] = r["loss"]
            if "final_train_loss" in r:
                summary = r
    return steps, summary, p.stdout


def cmd_train(a):
    work = os.path.join(a.fixture, "train")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(a.fixture, "chat.jsonl")
    targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    # The same math as finetune_llama: both losses are the mean NLL of the global batch's trained tokens
    # whatever the ranks (TrainTask::loss_items); no shuffling (the same global batches), AdamW without
    # weight decay, the adapters drawn from seed 0.
    same = ["data.path=" + data, "model.seq_len=64", "train.batch_size=8", "train.steps=3", "optimizer.lr=1e-2",
            "optimizer.weight_decay=0", "data.shuffle=false", "lora.rank=8", "lora.alpha=16", "runtime.seed=0",
            "lora.targets=" + ",".join("*." + t for t in targets.split(",")),
            "data.val_fraction=0.25", "sample.tokens=0", "precision.param_dtype=FP32", "precision.reduce_dtype=FP32"]
    for ranks, micro in ((1, 1), (2, 1), (2, 2)):
        ours, _, out = zs_train(a, ranks, work, "same%d-%d" % (ranks, micro), *same,
                                "train.micro_batches=%d" % micro)
        if ranks == 1:
            print(out.strip())
        theirs = steps_of(finetune(a, ranks, "--seq-len", "64", "--global-batch", "8", "--steps", "3", "--lr",
                                   "1e-2", "--lora-rank", "8", "--lora-alpha", "16", "--no-shuffle", "--lora-targets",
                                   targets, "--micro-batches", str(micro)).stdout)
        pairs = [(ours.get(k), theirs[k][0]) for k in sorted(theirs)]
        print("step losses at %d rank(s) x %d micro-batch(es), zeroshard-train vs finetune_llama: %s"
              % (ranks, micro, pairs))
        check(len(pairs) == 3 and all(x is not None and abs(x - y) <= 1e-5 * abs(y) for x, y in pairs),
              "zeroshard-train's Llama steps equal finetune_llama's (%d rank(s) x %d micro-batch(es), 3 steps, "
              "1e-5 relative)" % (ranks, micro))
    # LoRA over the NF4 base at 2 ranks from the chat data (its template's assistant turns trained),
    # with checkpoints, then the PEFT export scores as the checkpoint.
    ckpt = os.path.join(work, "ckpt")
    steps, summary, out = zs_train(a, 2, work, "qlora", "data.path=" + os.path.join(a.fixture, "chat.jsonl"),
                                   "model.seq_len=64", "train.batch_size=8", "train.steps=12", "optimizer.lr=1e-2",
                                   "lora.rank=8", "precision.frozen_linear=NF4", "checkpoint.dir=" + ckpt,
                                   "sample.tokens=8", "sample.prompt=user")
    print(out.strip())
    check(sorted(steps) == list(range(1, 13)), "12 steps in the metrics (%s)" % sorted(steps))
    first, last = summary.get("initial_val_loss", float("nan")), summary.get("final_val_loss", float("nan"))
    check(math.isfinite(first) and last < 0.9 * first,
          "QLoRA at 2 ranks: the held-out loss falls below 90%% (%.4f -> %.4f)" % (first, last))
    check("--- sample: 8 tokens" in out, "a sample is generated with the model's tokenizer")
    ckpt_tool = os.path.join(a.bin, "zeroshard-ckpt")
    info = run([ckpt_tool, "info", ckpt]).stdout
    check(re.search(r"^  unit .* \(nf4\) \[f\d+\] \(frozen\)", info, re.M) is not None,
          "the checkpoint stores the frozen projections in NF4 (precision.frozen_linear acted)")
    peft, merged = os.path.join(work, "peft"), os.path.join(work, "merged")
    out = run([ckpt_tool, "export", ckpt, peft, "--format", "peft"]).stdout
    print(out.strip())
    check("15 layers, r 8, lora_alpha 16" in out, "the PEFT export holds the 15 adapted layers (lora.targets empty: "
          "every projection and the head)")
    print(run([a.mpirun, "-n", "2", "--oversubscribe", ckpt_tool, "export", ckpt, merged, "--format", "hf",
               "--merge-lora"]).stdout.strip())
    ids, _ = eval_ids(a, work)
    tuned, exported = eval_nll(a, ckpt, ids), eval_nll(a, merged, ids)
    print("zeroshard-eval: checkpoint %.6f, merged Hugging Face export %.6f" % (tuned, exported))
    check(abs(exported - tuned) <= 1e-5 * abs(tuned), "the merged export of zeroshard-train's checkpoint scores as it "
          "(1e-5 relative)")
    finish()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fixture")
    f.add_argument("--out", required=True)
    for name in ("e2e", "qlora", "shards", "resume", "errors", "stop", "train"):
        c = sub.add_parser(name)
        c.add_argument("--fixture", required=True)
        c.add_argument("--bin", required=True)
        c.add_argument("--mpirun", required=True)
        if name == "qlora":
            c.add_argument("--clients", required=True, help="node_modules with node-llama-cpp")
    a = p.parse_args()
    {"fixture": cmd_fixture, "e2e": cmd_e2e, "qlora": cmd_qlora, "shards": cmd_shards, "resume": cmd_resume,
     "errors": cmd_errors, "stop": cmd_stop, "train": cmd_train}[a.command](a)


if __name__ == "__main__":
    main()
