# SPDX-License-Identifier: Apache-2.0
"""Python's view of every code point it knows (for test_chat_template's Unicode check): the str
methods the chat-template engine reimplements, applied to each character alone and to long
mixed strings.

    python3 unicode_reference.py OUT.json
"""
import json
import sys
import unicodedata

chars = [chr(c) for c in range(sys.maxunicode + 1)
         if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn"]
text = "".join(chars)
chunks = [text[i:i + 97] for i in range(0, len(text), 97)]
reference = {
    "unicode_version": unicodedata.unidata_version,
    "chars": text,
    "upper": "\0".join(c.upper() for c in chars),
    "lower": "\0".join(c.lower() for c in chars),
    "title": "\0".join(c.title() for c in chars),
    "space": "".join("1" if c.isspace() else "0" for c in chars),
    "printable": "".join("1" if c.isprintable() else "0" for c in chars),
    "cased": "".join("1" if c.islower() or c.isupper() or c.istitle() else "0" for c in chars),
    "chunks_lower": [c.lower() for c in chunks],
    "chunks_title": [c.title() for c in chunks],
    "chunks_capitalize": [c.capitalize() for c in chunks],
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(reference, f, ensure_ascii=False)
