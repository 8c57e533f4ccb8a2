# SPDX-License-Identifier: Apache-2.0
"""SentencePiece references: trains two small models on the corpus with the SentencePiece library
(BPE with byte fallback and split digits, as Llama's tokenizer.model is made; and a unigram model
with NFKC normalization), then encodes every corpus document with Debian's python3-sentencepiece.

zeroshard encodes special-token text written in a document (<s>, </s>, <unk>) as those tokens, as
transformers does; SentencePiece alone does not, so such strings are taken out of the document
first (the row then carries the "text" it encoded). The decoded text is SentencePiece's decode
of the ids other than control and unknown ones, which zeroshard's decode skips as special tokens.

    /usr/bin/python3 sentencepiece_reference.py OUT     (OUT holds corpus.jsonl)
Writes OUT/spm-bpe/tokenizer.model, OUT/spm-unigram/tokenizer.model, their *.reference.jsonl and
OUT/spm_cases.json.
"""
import json
import os
import sys

import sentencepiece as spm

out = sys.argv[1]
docs = [json.loads(line)["text"] for line in open(os.path.join(out, "corpus.jsonl"), encoding="utf-8") if line.strip()]
train = os.path.join(out, "spm-train.txt")
with open(train, "w", encoding="utf-8") as f:
    lines = [l for d in docs for l in d.split("\n") if l.strip()]
    f.write("\n".join(lines[: len(lines) // 2]) + "\n")

models = {
    "spm-bpe": dict(model_type="bpe", vocab_size=4000, byte_fallback=True, split_digits=True,
                    normalization_rule_name="identity", remove_extra_whitespaces=False,
                    allow_whitespace_only_pieces=True, character_coverage=0.9995),
    "spm-unigram": dict(model_type="unigram", vocab_size=3000, character_coverage=0.9995),
}
specials = ("<s>", "</s>", "<unk>")
cases = []
for name, options in models.items():
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    spm.SentencePieceTrainer.train(input=train, model_prefix=os.path.join(folder, "tokenizer"), num_threads=2,
                                   minloglevel=2, max_sentence_length=100000, **options)
    os.remove(os.path.join(folder, "tokenizer.vocab"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, "tokenizer.model"))
    with open(os.path.join(out, name + ".reference.jsonl"), "w", encoding="utf-8") as f:
        for doc in docs:
            text = doc
            for s in specials:
                text = text.replace(s, "")
            ids = [sp.bos_id()] + sp.encode(text)
            row = {"ids": ids, "decoded": sp.decode([i for i in ids if not (sp.is_control(i) or sp.is_unknown(i))])}
            if text != doc:
                row["text"] = text
            f.write(json.dumps(row) + "\n")
    cases.append({"name": name, "kind": "sentencepiece", "path": folder})
    print(f"reference {name}: {sp.get_piece_size()} pieces")
with open(os.path.join(out, "spm_cases.json"), "w") as f:
    json.dump(cases, f)
