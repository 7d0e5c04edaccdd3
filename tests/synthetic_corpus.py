"""A small synthetic English-German corpus of image-caption-like sentences, generated from a seed.

The tests need a parallel corpus that every clone has: this module writes one. A tiny grammar
makes English captions ("A young man in a blue shirt is playing a guitar on the street.") and
translates each into German with a case and gender system (articles and adjective endings in the
nominative, accusative and dative, a verb-final subordinate clause, umlauts and ß), so the pair
is close enough to Multi30k for the recipes' tokenisation, BPE and keyword steps to have real
work: raw, untokenised text with capitals, commas, apostrophes, quotation marks and full stops.

    write_corpus(raw_dir)            # {train,valid,test}.{en,de}, N_LINES pairs each
    corpus()["train"][0]             # (english, german) of the first training pair

The same seed always gives the same files; no sentence pair repeats across the splits.
"""
import os
import random

SPLITS = ("train", "valid", "test")
N_LINES = 300  # sentence pairs per split
SEED = 1

# noun: (German, gender, genitive singular) -- people and animals, subjects
PEOPLE = {"man": ("Mann", "m", "Mannes"), "woman": ("Frau", "f", "Frau"), "boy": ("Junge", "m", "Jungen"),
          "girl": ("Mädchen", "n", "Mädchens"), "child": ("Kind", "n", "Kindes"), "dog": ("Hund", "m", "Hundes"),
          "worker": ("Arbeiter", "m", "Arbeiters"), "musician": ("Musiker", "m", "Musikers"),
          "cyclist": ("Radfahrer", "m", "Radfahrers"), "player": ("Spieler", "m", "Spielers"),
          "baby": ("Baby", "n", "Babys"), "cat": ("Katze", "f", "Katze")}
PLURALS = {"men": "Männer", "women": "Frauen", "boys": "Jungen", "girls": "Mädchen", "children": "Kinder",
           "dogs": "Hunde", "people": "Leute", "workers": "Arbeiter", "musicians": "Musiker", "players": "Spieler"}
NUMBERS = {"two": "zwei", "three": "drei", "four": "vier", "several": "mehrere"}
ADJECTIVES = {"young": "jung", "old": "alt", "little": "klein", "tall": "groß", "happy": "fröhlich",
              "black": "schwarz", "white": "weiß", "brown": "braun", "blue": "blau", "red": "rot", "green": "grün",
              "yellow": "gelb"}
COLOURS = ["black", "white", "brown", "blue", "red", "green", "yellow"]
ANIMALS = {"dog", "cat", "dogs"}


def _adjective_for(rng, noun):
    """People are young, old, little, tall or happy; animals may also be black, white or brown."""
    choices = ["young", "old", "little", "tall", "happy"] + (["black", "white", "brown"] if noun in ANIMALS else [])
    return rng.choice(choices)

CLOTHES = {"shirt": ("Hemd", "n"), "hat": ("Hut", "m"), "jacket": ("Jacke", "f"), "dress": ("Kleid", "n"),
           "helmet": ("Helm", "m"), "cap": ("Mütze", "f"), "coat": ("Mantel", "m")}
THINGS = {"ball": ("Ball", "m"), "book": ("Buch", "n"), "bike": ("Fahrrad", "n"), "guitar": ("Gitarre", "f"),
          "apple": ("Apfel", "m"), "sign": ("Schild", "n"), "flag": ("Fahne", "f"), "camera": ("Kamera", "f"),
          "bag": ("Tasche", "f"), "stick": ("Stock", "m")}
# -ing form: (German 3rd person singular, plural)
INTRANSITIVE = {"running": ("läuft", "laufen"), "walking": ("geht", "gehen"), "sitting": ("sitzt", "sitzen"),
                "standing": ("steht", "stehen"), "jumping": ("springt", "springen"), "smiling": ("lächelt", "lächeln"),
                "waiting": ("wartet", "warten"), "dancing": ("tanzt", "tanzen"), "climbing": ("klettert", "klettern"),
                "sleeping": ("schläft", "schlafen"), "laughing": ("lacht", "lachen")}
TRANSITIVE = {"holding": ("hält", "halten"), "throwing": ("wirft", "werfen"), "carrying": ("trägt", "tragen"),
              "reading": ("liest", "lesen"), "eating": ("isst", "essen"), "playing": ("spielt", "spielen"),
              "riding": ("fährt", "fahren"), "watching": ("beobachtet", "beobachten")}
OBJECTS = {"holding": list(THINGS), "throwing": ["ball", "stick", "apple"], "carrying": ["bag", "book", "flag", "camera"],
           "reading": ["book", "sign"], "eating": ["apple"], "playing": ["guitar", "ball"], "riding": ["bike"],
           "watching": None}  # None: a person or animal
PLACES = [("on the beach", "am Strand"), ("in the park", "im Park"), ("on the street", "auf der Straße"),
          ("near the water", "in der Nähe des Wassers"), ("in the snow", "im Schnee"), ("on a bench", "auf einer Bank"),
          ("at the market", "auf dem Markt"), ("under a tree", "unter einem Baum"), ("in the city", "in der Stadt"),
          ("on the grass", "auf dem Rasen"), ("in front of a white fence", "vor einem weißen Zaun"),
          ("next to a red car", "neben einem roten Auto"), ("on a busy sidewalk", "auf einem belebten Gehweg"),
          ("in a small kitchen", "in einer kleinen Küche"), ("outside a shop", "vor einem Laden")]
QUOTES = ["Stop", "Open", "Welcome", "Sale", "Peace", "Hello"]

# German article and adjective endings: ARTICLE[case][kind][gender], ENDING[case][kind][gender]
ARTICLE = {"nom": {"a": {"m": "ein", "f": "eine", "n": "ein"}, "the": {"m": "der", "f": "die", "n": "das"}},
           "acc": {"a": {"m": "einen", "f": "eine", "n": "ein"}, "the": {"m": "den", "f": "die", "n": "das"}},
           "dat": {"a": {"m": "einem", "f": "einer", "n": "einem"}, "the": {"m": "dem", "f": "der", "n": "dem"}}}
ENDING = {"nom": {"a": {"m": "er", "f": "e", "n": "es"}, "the": {"m": "e", "f": "e", "n": "e"}},
          "acc": {"a": {"m": "en", "f": "e", "n": "es"}, "the": {"m": "en", "f": "e", "n": "e"}},
          "dat": {"a": {"m": "en", "f": "en", "n": "en"}, "the": {"m": "en", "f": "en", "n": "en"}}}


def _adj(en, case, kind, gender):
    return ADJECTIVES[en] + ENDING[case][kind][gender]


def _singular(rng, case, nouns=PEOPLE):
    """A singular noun phrase: (English words, German words, German gender)."""
    noun = rng.choice(sorted(nouns))
    de, gender = nouns[noun][0], nouns[noun][1]
    kind = "a" if rng.random() < 0.7 else "the"
    en_words, de_words = [kind], [ARTICLE[case][kind][gender]]
    if rng.random() < 0.5:
        adj = _adjective_for(rng, noun)
        en_words.append(adj)
        de_words.append(_adj(adj, case, kind, gender))
    if kind == "a" and (en_words[1:] + [noun])[0][0] in "aeiou":
        en_words[0] = "an"
    return en_words + [noun], de_words + [de], gender


def _plural(rng):
    noun = rng.choice(sorted(PLURALS))
    number = rng.choice(sorted(NUMBERS))
    en_words, de_words = [number], [NUMBERS[number]]
    if rng.random() < 0.5:
        adj = _adjective_for(rng, noun)
        en_words.append(adj)
        de_words.append(ADJECTIVES[adj] + "e")
    return en_words + [noun], de_words + [PLURALS[noun]]


def _clothing(rng):
    """'in a blue shirt' / 'wearing a red cap' / 'with a hat'."""
    item = rng.choice(sorted(CLOTHES))
    de, gender = CLOTHES[item]
    colour = rng.choice(COLOURS)
    art = "an" if colour[0] in "aeiou" else "a"
    form = rng.random()
    if form < 0.4:
        return ["in", art, colour, item], ["in", ARTICLE["dat"]["a"][gender], _adj(colour, "dat", "a", gender), de]
    if form < 0.7:
        return ["wearing", art, colour, item], ["mit", ARTICLE["dat"]["a"][gender], _adj(colour, "dat", "a", gender), de]
    return ["with", "a", item], ["mit", ARTICLE["dat"]["a"][gender], de]


def _subject(rng):
    """(English words, German words, plural?)"""
    r = rng.random()
    if r < 0.1:  # the man's dog
        owner = rng.choice(["man", "woman", "girl", "boy"])
        pet = rng.choice(["dog", "cat"])
        de, gender, _ = PEOPLE[pet]
        owner_de, owner_gender, owner_gen = PEOPLE[owner]
        genitive = {"m": "des", "f": "der", "n": "des"}[owner_gender]
        return ["the", owner + "'s", pet], [ARTICLE["nom"]["the"][gender], de, genitive, owner_gen], False
    if r < 0.2:  # a man and a woman
        a_en, a_de, _ = _singular(rng, "nom")
        b_en, b_de, _ = _singular(rng, "nom")
        return a_en + ["and"] + b_en, a_de + ["und"] + b_de, True
    if r < 0.45:
        en, de = _plural(rng)
        plural = True
    else:
        en, de, _ = _singular(rng, "nom")
        plural = False
    if rng.random() < 0.4:
        c_en, c_de = _clothing(rng)
        en, de = en + c_en, de + c_de
    return en, de, plural


def _predicate(rng, plural):
    """English words after the subject (from 'is'/'are'), German finite verb and its complements."""
    if rng.random() < 0.45:
        verb = rng.choice(sorted(INTRANSITIVE))
        en, de = [verb], [INTRANSITIVE[verb][plural]]
    else:
        verb = rng.choice(sorted(TRANSITIVE))
        objects = OBJECTS[verb]
        if objects is None:
            o_en, o_de, _ = _singular(rng, "acc")
        else:
            thing = rng.choice(objects)
            o_de, gender = THINGS[thing]
            kind = "a" if rng.random() < 0.7 else "the"
            art = ("an" if thing[0] in "aeiou" else "a") if kind == "a" else "the"
            o_en, o_de = [art, thing], [ARTICLE["acc"][kind][gender], o_de]
        en, de = [verb] + o_en, [TRANSITIVE[verb][plural]] + o_de
    return ["are" if plural else "is"] + en, de


def _sentence_pair(rng):
    """One (English, German) pair of raw text."""
    s_en, s_de, plural = _subject(rng)
    p_en, p_de = _predicate(rng, plural)
    en, de = s_en + p_en, s_de + p_de
    if rng.random() < 0.7:
        place_en, place_de = rng.choice(PLACES)
        en, de = en + place_en.split(), de + place_de.split()
    r = rng.random()
    if r < 0.15:  # a subordinate clause: the German verb goes last
        c_en, c_de, c_plural = _subject(rng)
        verb = rng.choice(sorted(INTRANSITIVE))
        en = en + [","] + ["while"] + [c_en[0]] + c_en[1:] + ["are" if c_plural else "is", verb]
        de = de + [","] + ["während"] + c_de + [INTRANSITIVE[verb][c_plural]]
    elif r < 0.25:  # a quotation
        word = rng.choice(QUOTES)
        en = en + ["next", "to", "a", "sign", "that", "says", f'"{word}"']
        de = de + ["neben", "einem", "Schild", ",", "auf", "dem", f'"{word}"', "steht"]
    text_en, text_de = " ".join(en) + ".", " ".join(de) + "."
    text_en, text_de = text_en.replace(" ,", ","), text_de.replace(" ,", ",")
    return text_en[0].upper() + text_en[1:], text_de[0].upper() + text_de[1:]


def corpus(n_lines: int = N_LINES, seed: int = SEED):
    """{split: [(english, german), ...]}: n_lines distinct pairs per split, no pair in two splits."""
    rng = random.Random(seed)
    seen, out = set(), {}
    for split in SPLITS:
        pairs = []
        while len(pairs) < n_lines:
            pair = _sentence_pair(rng)
            if pair[0] not in seen:
                seen.add(pair[0])
                pairs.append(pair)
        out[split] = pairs
    return out


def lines(split: str, lang: str, n_lines: int = N_LINES, seed: int = SEED):
    """The raw lines of one side of one split (lang 'en' or 'de')."""
    return [pair[0 if lang == "en" else 1] for pair in corpus(n_lines, seed)[split]]


def write_corpus(raw_dir, n_lines: int = N_LINES, seed: int = SEED) -> str:
    """Write {train,valid,test}.{en,de} (UTF-8, one sentence per line) into raw_dir; returns raw_dir."""
    os.makedirs(raw_dir, exist_ok=True)
    for split, pairs in corpus(n_lines, seed).items():
        for i, lang in enumerate(("en", "de")):
            with open(os.path.join(raw_dir, f"{split}.{lang}"), "w", encoding="utf-8", newline="\n") as f:
                f.write("".join(pair[i] + "\n" for pair in pairs))
    return str(raw_dir)
