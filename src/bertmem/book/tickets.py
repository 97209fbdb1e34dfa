"""A support-ticket file as real files come: skewed classes, two text columns, long and empty texts (A1, A4, tests).

The book's demo data is balanced movie reviews; a reader's file rarely is. `write_tickets` writes a CSV of
generated support tickets (`ticket_id, subject, body, category, created_at`) whose categories run from 30 % of
the rows down to 1.5 % (`CATEGORIES`), whose bodies run from 5 to 1,200 words (a tenth of them 300 or more),
and about 2 % of whose bodies are empty. Each category has words of its own, so a classifier can learn it; the
rest is shared filler. Deterministic for a seed; nothing is downloaded.
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from bertmem.data.frames import class_shares

# category -> (share of the rows before rounding, words that mark it)
CATEGORIES = {
    "billing": (0.30, "charged twice card statement amount bill payment"),
    "refund": (0.15, "refund money back return reimbursed credit"),
    "login": (0.11, "login sign in locked out two factor code session"),
    "shipping delay": (0.09, "parcel tracking courier late delivery shipped"),
    "damaged item": (0.08, "broken cracked damaged box arrived dented"),
    "password reset": (0.06, "password reset link email expired forgot"),
    "mobile app": (0.05, "app phone android iphone crashes update screen"),
    "invoice copy": (0.045, "invoice copy pdf receipt vat company address"),
    "subscription": (0.04, "subscription plan cancel renew annual monthly"),
    "feature request": (0.03, "feature suggestion would love option add please consider"),
    "account deletion": (0.02, "delete account remove data privacy gdpr close"),
    "accessibility": (0.015, "screen reader contrast font size keyboard navigation"),
}
FILLER = ("hello team I am writing because something is not right with my order and I would appreciate your help "
          "as soon as possible thank you in advance for looking into this I have been a customer for years and "
          "usually everything works fine but this time I need support").split()


def ticket_frame(rows: int = 1200, classes: int = 12, empty_share: float = 0.02, long_share: float = 0.1,
                 seed: int = 0) -> pd.DataFrame:
    """`rows` generated tickets over the first `classes` categories, skewed as `CATEGORIES` says (A1, A4, tests)."""
    if not 2 <= classes <= len(CATEGORIES):
        raise ValueError(f"classes must be in [2, {len(CATEGORIES)}], got {classes}")
    if rows < classes:
        raise ValueError(f"rows must be at least classes ({classes}), got {rows}")
    names = list(CATEGORIES)[:classes]
    # the categories' shares, exactly `rows` in all, every category at least one row (largest remainders)
    shares = class_shares({i: round(CATEGORIES[n][0] * 10_000) for i, n in enumerate(names)}, rows)
    rng = random.Random(seed)
    labels = [names[i] for i, count in shares.items() for _ in range(count)]
    rng.shuffle(labels)
    records = []
    for i, label in enumerate(labels):
        marks = CATEGORIES[label][1].split()
        subject = " ".join(rng.sample(marks, 2)).capitalize()
        long = rng.random() < long_share
        words = rng.randint(300, 1200) if long else rng.randint(5, 60)
        body = " ".join(rng.choice(marks) if rng.random() < 0.25 else rng.choice(FILLER) for _ in range(words))
        if rng.random() < empty_share:
            body = ""
        records.append({"ticket_id": f"T{10000 + i}", "subject": subject, "body": body, "category": label,
                        "created_at": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}"})
    return pd.DataFrame(records)


def write_tickets(path: str | Path, **kwargs) -> Path:
    """Write `ticket_frame(**kwargs)` as a CSV (empty bodies as empty fields) and return its path (A1, A4, tests)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ticket_frame(**kwargs).to_csv(path, index=False)
    return path


def write_text_label_tickets(path: str | Path, classes: int = 5, rows: int = 1200, seed: int = 0) -> Path:
    """Tickets as a two-column `text,label` file, no empty texts: a multi-class stand-in for a dataset name
    (`BERTMEM_DATASET`), so every chapter's settings run on more than two classes (the GPU-profile dry run)."""
    frame = ticket_frame(rows=rows, classes=classes, empty_share=0.0, seed=seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"text": (frame["subject"] + ". " + frame["body"]).str.strip(),
                  "label": frame["category"]}).to_csv(path, index=False)
    return path
