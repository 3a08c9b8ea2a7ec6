#include "core/suites/demo_corpus.h"
#include "core/prompt.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

// The lexicon: every word is letters only, so the demo pre-tokenizer keeps it whole. Verbs are in the past
// tense so that any subject fits; agreement of articles is avoided by using no "a"/"an".
const std::vector<std::string> kNouns = {
    "baker",   "farmer",   "sailor",    "painter",  "weaver",  "miller",   "potter",   "hunter",   "teacher",
    "student", "doctor",   "merchant",  "soldier",  "captain", "gardener", "shepherd", "traveler", "singer",
    "dancer",  "writer",   "carpenter", "fisher",   "cook",    "guard",    "pilot",    "mayor",    "judge",
    "clerk",   "child",    "neighbor",  "stranger", "friend",  "cousin",   "uncle",    "widow",    "monk",
    "river",   "mountain", "valley",    "forest",   "meadow",  "garden",   "bridge",   "harbor",   "castle",
    "village", "market",   "tower",     "chapel",   "cottage", "barn",     "mill",     "road",     "path",
    "field",   "orchard",  "lake",      "pond",     "island",  "cliff",    "cave",     "hill",     "shore",
    "window",  "door",     "table",     "chair",    "lamp",    "candle",   "basket",   "bottle",   "letter",
    "book",    "map",      "rope",      "wagon",    "boat",    "sail",     "anchor",   "lantern",  "blanket",
    "kettle",  "bucket",   "ladder",    "hammer",   "needle",  "thread",   "coin",     "ring",     "mirror",
    "clock",   "bell",     "drum",      "flute",    "song",    "story",    "dream",    "storm",    "wind",
    "rain",    "snow",     "cloud",     "sun",      "moon",    "star",     "morning",  "evening",  "night",
    "winter",  "summer",   "autumn",    "spring",   "horse",   "dog",      "cat",      "goat",     "sheep",
    "cow",     "bird",     "crow",      "owl",      "bee",     "beetle",   "mouse",    "rabbit",   "deer",
    "apple",   "pear",     "plum",      "bread",    "cheese",  "soup",     "honey",    "tea",      "wine",
    "stone",   "sand",     "clay",      "wood",     "iron",    "glass",    "paper",    "wool",     "silk",
    "feather", "leaf",     "branch",    "root",     "seed",    "flower",   "rose",     "tulip",    "fern",
    "moss",    "reed",     "shadow",    "echo",     "whisper", "festival", "journey",  "harvest",  "council",
    "lesson",  "promise",  "secret",    "rumor",    "puzzle",  "riddle",   "ledger",   "parcel",   "banner"};

const std::vector<std::string> kVerbs = {
    "walked",    "wandered", "rested",   "waited",   "paused",   "lingered",   "hurried",   "strolled",
    "marched",   "climbed",  "crossed",  "followed", "watched",  "noticed",    "painted",   "carried",
    "lifted",    "dropped",  "mended",   "cleaned",  "polished", "opened",     "closed",    "found",
    "lost",      "hid",      "showed",   "bought",   "sold",     "traded",     "borrowed",  "returned",
    "visited",   "greeted",  "praised",  "scolded",  "admired",  "remembered", "forgot",    "described",
    "measured",  "counted",  "weighed",  "sorted",   "gathered", "scattered",  "planted",   "watered",
    "harvested", "baked",    "cooked",   "tasted",   "shared",   "offered",    "delivered", "guarded",
    "studied",   "copied",   "signed",   "folded",   "wrapped",  "tied",       "untied",    "pushed",
    "pulled",    "dragged",  "rolled",   "tossed",   "caught",   "chased",     "led",       "guided",
    "sketched",  "hummed",   "whistled", "sang",     "laughed",  "smiled",     "nodded",    "waved",
    "slept",     "dreamed",  "listened", "answered", "asked",    "explained",  "repaired",  "built"};

const std::vector<std::string> kAdjectives = {
    "quiet",    "loud",     "old",      "young",   "tall",     "short",  "small",    "large",    "narrow",
    "wide",     "bright",   "dark",     "pale",    "green",    "blue",   "red",      "yellow",   "brown",
    "grey",     "white",    "black",    "warm",    "cold",     "wet",    "dry",      "soft",     "hard",
    "smooth",   "rough",    "heavy",    "light",   "quick",    "slow",   "calm",     "busy",     "lazy",
    "clever",   "gentle",   "brave",    "shy",     "proud",    "humble", "honest",   "curious",  "patient",
    "careful",  "cheerful", "sleepy",   "hungry",  "tired",    "happy",  "lonely",   "friendly", "ancient",
    "distant",  "hidden",   "broken",   "golden",  "wooden",   "silent", "rusty",    "dusty",    "muddy",
    "sunny",    "windy",    "rainy",    "frozen",  "fragrant", "bitter", "sweet",    "sour",     "fresh",
    "crooked",  "tidy",     "shabby",   "elegant", "plain",    "famous", "ordinary", "strange",  "familiar",
    "peaceful", "restless", "faithful", "modest",  "steady",   "nimble", "sturdy",   "fragile",  "vivid"};

const std::vector<std::string> kAdverbs = {
    "slowly",  "quickly", "quietly",  "loudly",     "gently",   "carefully",  "happily",   "sadly",
    "calmly",  "eagerly", "softly",   "boldly",     "kindly",   "proudly",    "patiently", "suddenly",
    "rarely",  "often",   "always",   "never",      "again",    "together",   "alone",     "early",
    "late",    "twice",   "nearby",   "outside",    "inside",   "everywhere", "gladly",    "warmly",
    "briskly", "lazily",  "politely", "cheerfully", "silently", "openly",     "humbly",    "steadily"};

const std::vector<std::string> kPlaces = {
    "Ashford",   "Brambleton", "Coldwater",  "Dunmore",    "Eastvale",   "Fairhaven",   "Glenbrook",
    "Highmoor",  "Ironbridge", "Juniper",    "Kestrel",    "Larkspur",   "Millbrook",   "Northwick",
    "Oakhurst",  "Pinecrest",  "Queensford", "Redcliff",   "Stonehill",  "Thornbury",   "Underwood",
    "Valemont",  "Westmarch",  "Yarrow",     "Zephyrton",  "Amberley",   "Blackpool",   "Cresthaven",
    "Driftwood", "Elmstead",   "Foxmoor",    "Greywater",  "Hollowell",  "Ivybridge",   "Kingsmead",
    "Lowfield",  "Marshgate",  "Newhaven",   "Oldcastle",  "Pebbleton",  "Ravensworth", "Silverdale",
    "Tidewater", "Upperton",   "Westbrook",  "Willowmere", "Windermere", "Wrenfield"};

const std::vector<std::string> kPrepositions = {"across", "along",  "behind", "beside", "near",    "under",
                                                "over",   "around", "toward", "past",   "beyond",  "through",
                                                "into",   "onto",   "by",     "with",   "without", "from"};

// Determiners and their capitalised sentence-start forms.
const std::vector<std::string> kDeterminers = {"the", "every",   "each", "some", "one",   "this", "that",
                                               "no",  "another", "her",  "his",  "their", "our"};
const std::vector<std::string> kTimeOpeners = {"Later",      "Then",   "Meanwhile",  "Yesterday",
                                               "Today",      "Soon",   "Afterwards", "Once",
                                               "Eventually", "Before", "Tomorrow"};
const std::vector<std::string> kConnectives = {"and", "while", "because", "although", "so", "but", "until"};
const std::vector<std::string> kIntensifiers = {"very", "quite", "rather", "too"};
const std::vector<std::string> kOtherWords = {"was", "In", "Near", "Beyond", "of", "and", "from"};

// Needle keys: colour and animal compounds, written as one word so that each is one token.
const std::vector<std::string> kKeyColours = {
    "amber", "azure", "cobalt", "crimson", "scarlet", "ochre",  "violet", "indigo",  "teal",  "jade",
    "ivory", "ebony", "silver", "golden",  "copper",  "bronze", "coral",  "saffron", "umber", "russet"};
const std::vector<std::string> kKeyAnimals = {
    "fox",   "heron", "otter", "lynx",   "falcon", "badger", "marten", "ibis",  "wren",  "bison",
    "gecko", "puma",  "raven", "salmon", "tapir",  "walrus", "yak",    "zebra", "koala", "stoat"};

std::string capitalize(std::string w) {
    if (!w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
    return w;
}

bool is_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::string Needle::sentence() const {
    return "The special magic number for " + key + " is " + value + ".";
}

DemoTextGenerator::DemoTextGenerator(uint64_t seed) : rng_(seed) {}

uint64_t DemoTextGenerator::below(uint64_t n) {
    if (n == 0) throw Error("DemoTextGenerator::below: empty range");
    // Rejection sampling keeps the draw exactly uniform.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = rng_();
    while (x >= limit) x = rng_();
    return x % n;
}

const std::vector<std::string>& DemoTextGenerator::lexicon() {
    static const std::vector<std::string> words = [] {
        std::set<std::string> s;
        for (const auto* list : {&kNouns, &kVerbs, &kAdjectives, &kAdverbs, &kPlaces, &kPrepositions,
                                 &kDeterminers, &kTimeOpeners, &kConnectives, &kIntensifiers, &kOtherWords})
            s.insert(list->begin(), list->end());
        for (const auto& d : kDeterminers) s.insert(capitalize(d));
        return std::vector<std::string>(s.begin(), s.end());
    }();
    return words;
}

const std::vector<std::string>& DemoTextGenerator::keys() {
    static const std::vector<std::string> words = [] {
        std::vector<std::string> k;
        for (const auto& c : kKeyColours)
            for (const auto& a : kKeyAnimals) k.push_back(c + a);
        return k;
    }();
    return words;
}

const std::vector<std::string>& DemoTextGenerator::template_words() {
    static const std::vector<std::string> words = {"The", "special", "magic", "number",   "for",
                                                   "is",  "What",    "the",   "Question", "Answer"};
    return words;
}

const std::vector<std::string>& DemoTextGenerator::line_start_words() {
    static const std::vector<std::string> words = [] {
        std::set<std::string> s;
        for (const auto& w : lexicon())
            if (!w.empty() && w[0] >= 'A' && w[0] <= 'Z') s.insert(w);
        for (const char* w : {"The", "What", "Question", "Answer"}) s.insert(w);
        return std::vector<std::string>(s.begin(), s.end());
    }();
    return words;
}

std::string DemoTextGenerator::question(const std::string& key) {
    return "What is the special magic number for " + key + "?";
}

std::string DemoTextGenerator::answer_prefix(const std::string& key) {
    return "The special magic number for " + key + " is";
}

std::string DemoTextGenerator::filler_sentence() {
    auto pick = [&](const std::vector<std::string>& v) -> const std::string& { return v[below(v.size())]; };
    auto noun_phrase = [&](bool adjective) {
        std::string s = pick(kDeterminers);
        if (adjective) s += " " + pick(kAdjectives);
        return s + " " + pick(kNouns);
    };
    std::string s;
    switch (below(9)) {
        case 0:  // The quiet baker walked across the old bridge.
            s = noun_phrase(true) + " " + pick(kVerbs) + " " + pick(kPrepositions) + " " +
                noun_phrase(below(2));
            break;
        case 1:  // The farmer carried the heavy basket slowly.
            s = noun_phrase(false) + " " + pick(kVerbs) + " " + noun_phrase(true) + " " + pick(kAdverbs);
            break;
        case 2:  // In Ashford, the sailor mended the rope beside the harbor.
            s = "In " + pick(kPlaces) + ", " + noun_phrase(below(2)) + " " + pick(kVerbs) + " " +
                noun_phrase(false) + " " + pick(kPrepositions) + " " + noun_phrase(true);
            break;
        case 3:  // The old painter and the dog waited near Dunmore.
            s = noun_phrase(true) + " and " + noun_phrase(false) + " " + pick(kVerbs) + " " +
                pick(kPrepositions) + " " + pick(kPlaces);
            break;
        case 4:  // Later, the clerk from Eastvale counted the coins quietly.
            s = pick(kTimeOpeners) + ", " + noun_phrase(below(2)) + " from " + pick(kPlaces) + " " +
                pick(kVerbs) + " " + noun_phrase(false) + " " + pick(kAdverbs);
            break;
        case 5:  // The river was very calm and the meadow was green.
            s = noun_phrase(false) + " was " + pick(kIntensifiers) + " " + pick(kAdjectives) + " " +
                pick(kConnectives) + " " + noun_phrase(false) + " was " + pick(kAdjectives);
            break;
        case 6:  // Beyond Foxmoor, the brave hunter gently followed the deer.
            s = std::string(below(2) ? "Beyond " : "Near ") + pick(kPlaces) + ", " + noun_phrase(true) + " " +
                pick(kAdverbs) + " " + pick(kVerbs) + " " + noun_phrase(false);
            break;
        case 7:  // The weaver sang, while the child slept beside the lamp.
            s = noun_phrase(below(2)) + " " + pick(kVerbs) + ", " + pick(kConnectives) + " " +
                noun_phrase(false) + " " + pick(kVerbs) + " " + pick(kPrepositions) + " " +
                noun_phrase(below(2));
            break;
        default:  // Meanwhile, the lanterns of Glenbrook were bright.
            s = pick(kTimeOpeners) + ", " + noun_phrase(false) + " of " + pick(kPlaces) + " was " +
                pick(kAdjectives) + " and " + pick(kAdjectives);
            break;
    }
    s[0] = capitalize(s.substr(0, 1))[0];
    return s + ".";
}

Needle DemoTextGenerator::needle(const std::vector<std::string>& avoid_keys) {
    const auto& k = keys();
    if (avoid_keys.size() >= k.size()) throw Error("DemoTextGenerator::needle: every key is already in use");
    Needle n;
    do {
        n.key = k[below(k.size())];
    } while (std::find(avoid_keys.begin(), avoid_keys.end(), n.key) != avoid_keys.end());
    const int digits = 6 + static_cast<int>(below(2));
    n.value = std::string(1, static_cast<char>('1' + below(9)));
    for (int i = 1; i < digits; ++i) n.value += static_cast<char>('0' + below(10));
    return n;
}

std::string DemoDocument::prompt() const {
    return text + plain_question_suffix(question, answer_prefix);
}

int64_t demo_token_count(const std::string& text) {
    // Mirrors the demo pre-tokenizer: " ?[A-Za-z]+ | ?[0-9] | ?[^\sA-Za-z0-9] | \s+(?!\S) | \s+".
    int64_t n = 0;
    size_t i = 0;
    const size_t len = text.size();
    while (i < len) {
        const char c = text[i];
        if (c == ' ' && i + 1 < len && !is_space(text[i + 1])) {
            ++i;  // the space joins the following piece
        } else if (is_space(c)) {
            size_t j = i;
            while (j < len && is_space(text[j])) ++j;
            // A run of several followed by a non-space gives back its last character (\s+(?!\S)): a ' ' joins
            // the next piece, anything else ("\n" of "\n\nQuestion") is a piece of its own.
            if (j < len && j - i > 1) {
                if (text[j - 1] == ' ')
                    --j;
                else
                    ++n;
            }
            ++n;
            i = j;
            continue;
        }
        const char d = text[i];
        if (is_letter(d)) {
            while (i < len && is_letter(text[i])) ++i;
        } else {
            // A digit or a punctuation character (a multi-byte UTF-8 character counts once per byte run).
            ++i;
            if (static_cast<unsigned char>(d) >= 0x80)
                while (i < len && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
        }
        ++n;
    }
    return n;
}

DemoDocument make_document(uint64_t seed, int64_t target_tokens, int n_distractors, double depth_percent,
                           double repeat_share) {
    if (target_tokens <= 0) throw Error("make_document: target_tokens must be positive");
    if (n_distractors < 0) throw Error("make_document: n_distractors must not be negative");
    if (!(depth_percent >= 0.0 && depth_percent <= 100.0))
        throw Error("make_document: depth_percent must be within [0, 100]");
    if (!(repeat_share >= 0.0 && repeat_share < 1.0))
        throw Error("make_document: repeat_share must be within [0, 1)");
    DemoTextGenerator gen(seed);
    DemoDocument doc;
    std::vector<std::string> used;
    doc.needle = gen.needle();
    used.push_back(doc.needle.key);
    for (int i = 0; i < n_distractors; ++i) {
        doc.distractors.push_back(gen.needle(used));
        used.push_back(doc.distractors.back().key);
    }
    // Sentence token counts: a sentence after the first adds its leading space to its first word's piece.
    int64_t tokens = demo_token_count(doc.needle.sentence());
    for (const auto& d : doc.distractors) tokens += demo_token_count(d.sentence());
    std::vector<std::string> filler;
    const uint64_t repeat_per_million = static_cast<uint64_t>(repeat_share * 1e6);
    while (tokens < target_tokens || filler.empty()) {
        // No draw at all without repeats, so that such documents do not depend on the feature.
        if (repeat_per_million > 0 && !filler.empty() && gen.below(1000000) < repeat_per_million)
            filler.push_back(filler[gen.below(filler.size())]);
        else
            filler.push_back(gen.filler_sentence());
        tokens += demo_token_count(filler.back());
    }
    // Slots are the boundaries between filler sentences: 0 = before the first, filler.size() = after the
    // last. The target's slot is the one whose share of the filler tokens before it is closest to
    // depth_percent.
    const size_t n_slots = filler.size() + 1;
    std::vector<int64_t> before(n_slots, 0);
    for (size_t i = 0; i < filler.size(); ++i) before[i + 1] = before[i] + demo_token_count(filler[i]) + 1;
    const double wanted = depth_percent / 100.0 * static_cast<double>(before.back());
    size_t target_slot = 0;
    for (size_t i = 1; i < n_slots; ++i)
        if (std::abs(static_cast<double>(before[i]) - wanted) <
            std::abs(static_cast<double>(before[target_slot]) - wanted))
            target_slot = i;
    std::vector<std::vector<const Needle*>> at_slot(n_slots);
    for (const auto& d : doc.distractors) at_slot[gen.below(n_slots)].push_back(&d);
    // The target goes first in its slot when at depth 0, last otherwise, so that 0 and 100 are the extremes.
    auto& slot = at_slot[target_slot];
    if (target_slot == 0)
        slot.insert(slot.begin(), &doc.needle);
    else
        slot.push_back(&doc.needle);

    std::string text;
    auto append = [&](const std::string& sentence) {
        if (!text.empty()) text += ' ';
        text += sentence;
    };
    for (size_t s = 0; s < n_slots; ++s) {
        for (const Needle* n : at_slot[s]) {
            if (n == &doc.needle) doc.needle_offset = text.empty() ? 0 : text.size() + 1;
            append(n->sentence());
        }
        if (s < filler.size()) append(filler[s]);
    }
    doc.text = std::move(text);
    doc.question = DemoTextGenerator::question(doc.needle.key);
    doc.answer_prefix = DemoTextGenerator::answer_prefix(doc.needle.key);
    doc.answer = " " + doc.needle.value + ".";
    doc.n_tokens = demo_token_count(doc.text);
    return doc;
}

namespace {

std::vector<std::string> demo_tokenizer_texts(uint64_t seed, int n_documents) {
    std::vector<std::string> texts;
    // Every vocabulary word on its own, with its leading space: each becomes one piece of the training text.
    for (const auto* list :
         {&DemoTextGenerator::lexicon(), &DemoTextGenerator::keys(), &DemoTextGenerator::template_words()})
        for (const auto& w : *list) texts.push_back(" " + w);
    for (const auto& w : DemoTextGenerator::line_start_words()) texts.push_back(w);
    for (char d = '0'; d <= '9'; ++d) {
        texts.push_back(std::string(1, d));
        texts.push_back(std::string(" ") + d);
    }
    // Real documents give the pieces their corpus frequencies (and the punctuation and line breaks).
    DemoTextGenerator gen(seed);
    for (int i = 0; i < n_documents; ++i) {
        const int64_t length = 64 + static_cast<int64_t>(gen.below(512));
        const DemoDocument doc = make_document(gen.rng()(), length, static_cast<int>(gen.below(4)),
                                               static_cast<double>(gen.below(101)));
        texts.push_back(doc.prompt() + doc.answer);
    }
    return texts;
}

}  // namespace

TrainedTokenizer train_demo_tokenizer(uint64_t seed, int n_documents) {
    BpeTrainerOptions options;
    options.model_max_length = 8192;
    return train_byte_level_bpe(demo_tokenizer_texts(seed, n_documents), options);
}

TrainedTokenizer train_demo_tokenizer(uint64_t seed, int n_documents,
                                      const std::vector<std::string>& extra_texts, int64_t max_vocab_size) {
    std::vector<std::string> texts = demo_tokenizer_texts(seed, n_documents);
    const size_t n_demo = texts.size();
    // A demo piece counts more than all extra text together, so each merge a demo piece needs comes before
    // any merge that only extra pieces need.
    int64_t extra_pieces = 1;
    for (const auto& t : extra_texts) extra_pieces += static_cast<int64_t>(t.size());
    std::vector<int64_t> weights(texts.size(), extra_pieces);
    texts.insert(texts.end(), extra_texts.begin(), extra_texts.end());
    weights.resize(texts.size(), 1);
    BpeTrainerOptions options;
    options.model_max_length = 8192;
    options.max_vocab_size = max_vocab_size;
    TrainedTokenizer t = train_byte_level_bpe(texts, options, weights);
    const Tokenizer tok = Tokenizer::from_json(t.tokenizer, t.tokenizer_config, "demo tokenizer");
    for (size_t i = 0; i < n_demo; ++i) {
        const std::string& text = texts[i];
        if (static_cast<int64_t>(tok.encode(text, false).size()) != demo_token_count(text))
            throw Error("demo tokenizer: a vocabulary of " + std::to_string(max_vocab_size) +
                        " tokens leaves demo text split (\"" + text.substr(0, 40) +
                        "\"): raise the vocabulary size");
    }
    return t;
}

}  // namespace varrate
