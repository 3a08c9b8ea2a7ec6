#!/usr/bin/env python3
"""Writes needle.txt, the document of the README's example: sentences in the demo model's style (its filler
templates and words) around one needle, "The special magic number for copperbison is 4817203.", and three
distractor needles. Deterministic; the committed needle.txt is its output."""
import random
from pathlib import Path

NOUNS = "baker farmer sailor painter weaver miller potter hunter teacher river mountain valley forest meadow " \
        "garden bridge harbor castle village market tower lantern basket rope wagon boat lamp".split()
VERBS = "walked wandered rested waited paused crossed followed watched noticed carried lifted mended".split()
ADJECTIVES = "quiet loud old young tall small bright dark pale green blue warm cold soft".split()
ADVERBS = "slowly quickly quietly gently carefully happily calmly softly".split()
PLACES = "Ashford Brambleton Coldwater Dunmore Eastvale Fairhaven Glenbrook Highmoor Ironbridge".split()
PREPOSITIONS = "across along behind beside near under over around toward".split()
DETERMINERS = "the every each some one this that".split()


def sentence(rng):
    pick = rng.choice
    np = lambda adj: pick(DETERMINERS) + (" " + pick(ADJECTIVES) if adj else "") + " " + pick(NOUNS)  # noqa: E731
    kind = rng.randrange(4)
    if kind == 0:
        s = f"{np(True)} {pick(VERBS)} {pick(PREPOSITIONS)} {np(False)}"
    elif kind == 1:
        s = f"{np(False)} {pick(VERBS)} {np(True)} {pick(ADVERBS)}"
    elif kind == 2:
        s = f"In {pick(PLACES)}, {np(False)} {pick(VERBS)} {np(False)} {pick(PREPOSITIONS)} {np(True)}"
    else:
        s = f"Near {pick(PLACES)}, {np(True)} {pick(ADVERBS)} {pick(VERBS)} {np(False)}"
    return s[0].upper() + s[1:] + "."


def main():
    rng = random.Random(41)
    sentences = [sentence(rng) for _ in range(60)]
    needles = {12: "The special magic number for azurefalcon is 1989046.",
               30: "The special magic number for copperbison is 4817203.",
               41: "The special magic number for russetmarten is 4241984.",
               52: "The special magic number for umberwren is 3582568."}
    for at, needle in sorted(needles.items(), reverse=True):
        sentences.insert(at, needle)
    Path(__file__).with_name("needle.txt").write_text(" ".join(sentences) + "\n")


if __name__ == "__main__":
    main()
