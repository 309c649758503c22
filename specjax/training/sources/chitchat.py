"""chitchat-dataset (MIT): 7,168 human conversations, each a list of turns of one or more messages by one sender."""

import json
import os

from specjax.training.sources.base import Document, package_dir


def read(root: str = ""):
  """One Document per conversation: a sender's consecutive messages joined into one turn, turns alternating user /
  assistant from the first sender."""
  with open(os.path.join(package_dir("chitchat_dataset", root), "dataset.json")) as f:
    conversations = json.load(f)
  for conv_id, conversation in sorted(conversations.items()):
    turns = []
    for turn in conversation.get("messages", []):
      text = "\n".join(m["text"].strip() for m in turn if m.get("text", "").strip())
      if text:
        turns.append(text)
    if len(turns) >= 2:
      roles = ("user", "assistant")
      yield Document("chitchat", conv_id, messages=tuple({"role": roles[i % 2], "content": t}
                                                        for i, t in enumerate(turns)))
