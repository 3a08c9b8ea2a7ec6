// The method registry's contract, for every registered method rather than a pinned list: its traits agree
// with each other and with what the method does (a budgeted method meets kappa or refuses it up front, the
// reference keeps everything, a quantizer ignores kappa), the settings it says it reads are the ones that
// change its output, and nothing outside codec/ and tests/ compares a string with a method's name.
#include "tests/test_support.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "base/error.h"
#include "codec/registry.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

SyntheticShape shape() {
    SyntheticShape s;
    s.n_kv_head = 2;
    s.n_head = 4;
    s.head_dim = 16;    // D = 64
    s.n_tokens = 1024;  // DuoAttention's streaming heads keep 384 tokens: it meets kappa >= 0.375 here
    s.n_layers = 2;
    return s;
}

CodecSettings settings(double kappa) {
    CodecSettings s;
    s.budget = kappa;
    s.r_min = 4;
    s.rank = 64;
    return s;
}

// A synthetic layer with what a prefill and the probes add: query statistics (Expected Attention), the
// context's ids, the question's attention and KVzip's repeat scores.
LayerCapture capture(uint64_t seed) {
    const SyntheticShape sh = shape();
    LayerCapture c = synthetic_capture(sh, seed, 1);
    at::manual_seed(seed);
    c.query_mean = at::randn({sh.n_head, sh.head_dim});
    c.query_cov = at::eye(sh.head_dim).expand({sh.n_head, sh.head_dim, sh.head_dim}).contiguous();
    c.query_mean_all = c.query_mean + 0.1 * at::randn({sh.n_head, sh.head_dim});
    c.token_ids = at::randint(0, 50, {sh.n_tokens}, at::kLong);  // varrate-rare's once-only ids
    // The extra passes' outputs (core/probe.h): the question's attention, KVzip's repeat scores and every
    // query's observed and non-causal attention.
    c.question_attention = at::randn({sh.n_head, sh.n_tokens}).softmax(-1);
    c.repeat_scores = at::rand({sh.n_kv_head, sh.n_tokens});
    c.observed_attention = at::rand({sh.n_head, sh.n_tokens});
    c.noncausal_attention = at::rand({sh.n_head, sh.n_tokens});
    return c;
}

}  // namespace

class TestCodecRegistry : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void traits_agree_with_each_other() {
        std::set<int> roles;
        for (const std::string& name : method_names()) {
            const MethodTraits& t = method_traits(name);
            const QByteArray n = QByteArray::fromStdString(name);
            QCOMPARE(std::string(t.name), name);
            QVERIFY2(std::string(t.description).size() > 10, n);
            QVERIFY2(t.needs_basis == (t.family == MethodFamily::LowRank), n);
            QVERIFY2((t.budget == BudgetRule::Uncompressed) == (t.family == MethodFamily::Reference), n);
            // Own settings set the footprint of the quantizers (bits) and of channel pruning alone (ThinK's
            // ratio).
            if (t.family == MethodFamily::Quantization) QVERIFY2(t.budget == BudgetRule::OwnSettings, n);
            if (t.budget == BudgetRule::OwnSettings)
                QVERIFY2(t.family == MethodFamily::Quantization || t.family == MethodFamily::ChannelPruning,
                         n);
            QVERIFY2((t.budget_check == BudgetCheck::Codec) == t.needs_basis, n);
            // A budgeted method reads kappa; the others do not.
            QVERIFY2(((t.reads & kReadsBudget) != 0) == (t.budget == BudgetRule::Kappa), n);
            if (t.colour != ColourRole::Own)
                QVERIFY2(roles.insert(static_cast<int>(t.colour)).second, n);  // one method per role
            QCOMPARE(method_description(name), std::string(t.description));
            QVERIFY(find_method_traits(name) == &t);
        }
        QVERIFY(find_method_traits("no-such-method") == nullptr);
        EXPECT_ERROR(method_traits("no-such-method"), "unknown compression method", "varrate");
        QCOMPARE(reference_method_name(), std::string("full"));
        QCOMPARE(method_with_role(ColourRole::Method), std::string("varrate"));
        QCOMPARE(method_with_role(ColourRole::Ablation), std::string("flat"));
        QCOMPARE(to_string(MethodFamily::Eviction), std::string("eviction"));
    }

    // Every method, on the same synthetic layers (with the probes' outputs): a budgeted one meets kappa (its
    // accounted footprint within it) or its BudgetCheck refuses kappa before any work; the reference is the
    // capture; a quantizer's footprint does not move with kappa.
    void every_method_meets_or_refuses_its_budget() {
        const SyntheticShape sh = shape();
        const int64_t dim = 2 * sh.n_kv_head * sh.head_dim;
        auto basis = random_basis(2, dim, 64, 16, 4, 9);
        for (const std::string& name : method_names()) {
            const MethodTraits& t = method_traits(name);
            const QByteArray n = QByteArray::fromStdString(name);
            std::map<double, double> footprint;
            for (double kappa : {0.25, 0.5}) {
                check_budget_feasible(name, settings(kappa), sh.n_tokens, sh.n_layers, dim, 4);
                auto m = make_method(name, settings(kappa), t.needs_basis ? basis : nullptr);
                const LayerCapture cap = capture(31);
                LayerResult r;
                try {
                    r = m->compress(cap);
                } catch (const InfeasibleBudget& e) {
                    // Refused at run time (DuoAttention below 0.375): the message names the method.
                    QVERIFY2(kappa == 0.25 && std::string(e.what()).find(name) != std::string::npos,
                             qPrintable(QString("%1 at kappa %2: %3").arg(n).arg(kappa).arg(e.what())));
                    continue;
                }
                footprint[kappa] = r.diagnostics.footprint;
                QCOMPARE(r.kv.keys.size(0), cap.keys.size(0));
                if (t.budget == BudgetRule::Kappa)
                    QVERIFY2(
                        r.diagnostics.footprint <= kappa + 1e-9,
                        qPrintable(QString("%1: %2 > %3").arg(n).arg(r.diagnostics.footprint).arg(kappa)));
                if (t.budget == BudgetRule::Uncompressed) {
                    QCOMPARE(r.diagnostics.footprint, 1.0);
                    QVERIFY2(at::equal(r.kv.keys, cap.keys) && at::equal(r.kv.values, cap.values), n);
                }
            }
            if (t.budget == BudgetRule::OwnSettings) QCOMPARE(footprint[0.25], footprint[0.5]);
            // A kappa no method can meet on 1024 tokens: refused up front where the traits say there is a
            // check, with the method's name in the message.
            if (t.budget_check != BudgetCheck::None) {
                const std::string msg = test::error_message(
                    [&] { check_budget_feasible(name, settings(0.002), sh.n_tokens, sh.n_layers, dim, 4); });
                QVERIFY2(msg.find(name) != std::string::npos, qPrintable(QString::fromStdString(msg)));
            }
        }
    }

    // capture_needs is complete: a method that needs no probe and does not say it reads query statistics or
    // token ids analyses a capture without them; one that says so refuses such a capture, naming what is
    // missing.
    void capture_needs_are_what_a_method_reads() {
        const SyntheticShape sh = shape();
        auto basis = random_basis(2, 2 * sh.n_kv_head * sh.head_dim, 64, 16, 4, 9);
        int flagged = 0;
        for (const std::string& name : method_names()) {
            const MethodTraits& t = method_traits(name);
            if (t.probe != MethodProbe::None) continue;
            for (const uint32_t need : {uint32_t{kNeedsQueryStats}, uint32_t{kNeedsTokenIds}}) {
                LayerCapture c = capture(31);
                if (need == kNeedsQueryStats) c.query_mean = c.query_cov = c.query_mean_all = at::Tensor();
                if (need == kNeedsTokenIds) c.token_ids = at::Tensor();
                auto m = make_method(name, settings(0.5), t.needs_basis ? basis : nullptr);
                const QByteArray n =
                    QByteArray::fromStdString(name + (need == kNeedsQueryStats ? " without "
                                                                                 "query statistics"
                                                                               : " without token ids"));
                if (t.capture_needs & need) {
                    ++flagged;
                    const std::string msg = test::error_message([&] { m->compress(c); });
                    QVERIFY2(!msg.empty(), n);
                } else {
                    try {
                        m->compress(c);
                    } catch (const std::exception& e) {
                        QFAIL(qPrintable(QString("%1: %2").arg(n, e.what())));
                    }
                }
            }
        }
        QVERIFY(flagged >= 3);  // expected-attention, varrate@expected-attention, varrate-rare
    }

    // kNeedsAllLayers is what layer_budgets does: a method shares kappa across layers (per-layer budgets from
    // every layer's analysis) exactly when its traits say so.
    void all_layers_need_is_layer_budgets() {
        const SyntheticShape sh = shape();
        auto basis = random_basis(2, 2 * sh.n_kv_head * sh.head_dim, 64, 16, 4, 9);
        int flagged = 0;
        for (const std::string& name : method_names()) {
            const MethodTraits& t = method_traits(name);
            auto m = make_method(name, settings(0.5), t.needs_basis ? basis : nullptr);
            std::vector<std::shared_ptr<const LayerAnalysis>> layers;
            for (int64_t l = 0; l < 2; ++l) {
                LayerCapture c = capture(31 + static_cast<uint64_t>(l));
                c.layer = l;
                layers.push_back(m->analyse(c));
            }
            const bool shares = !m->layer_budgets(layers, settings(0.5)).empty();
            flagged += shares;
            QVERIFY2(shares == ((t.capture_needs & kNeedsAllLayers) != 0), name.c_str());
        }
        QVERIFY(flagged >= 3);  // varrate-layers, varrate-layers@<signal>, kvzip
    }

    // The settings a method says it reads (what the app lists for it) change its output; one it says it
    // does not read leaves it unchanged.
    void reads_are_what_changes_the_output() {
        auto basis = random_basis(2, 64, 64, 16, 4, 9);
        const LayerCapture cap = capture(33);
        struct Knob {
            uint32_t bit;
            void (*apply)(CodecSettings&);
        };
        const Knob knobs[] = {{kReadsBudget, [](CodecSettings& s) { s.budget = 0.45; }},
                              {kReadsObsWindow, [](CodecSettings& s) { s.obs_window = 16; }},
                              {kReadsPool, [](CodecSettings& s) { s.pool_kernel = 1; }},
                              {kReadsWindow, [](CodecSettings& s) { s.window = 16; }}};
        for (const char* name : {"varrate", "snapkv", "streamingllm", "kivi2", "full"}) {
            const MethodTraits& t = method_traits(name);
            auto keys_with = [&](const CodecSettings& s) {
                return make_method(name, s, t.needs_basis ? basis : nullptr)->compress(cap).kv.keys;
            };
            const at::Tensor base = keys_with(settings(0.3));
            for (const Knob& k : knobs) {
                CodecSettings s = settings(0.3);
                k.apply(s);
                const at::Tensor other = keys_with(s);
                const bool same = other.sizes() == base.sizes() && at::equal(other, base);
                QVERIFY2(same == !(t.reads & k.bit),
                         qPrintable(QString("%1: setting bit %2").arg(name).arg(k.bit)));
            }
        }
    }

    // Acceptance of the traits: no code outside codec/ (and the tests) compares a string with a registered
    // method's name; what differs between methods is asked of the registry.
    void no_method_name_compares_outside_codec() {
        const std::filesystem::path root = VARRATE_SOURCE_DIR;
        std::string alternatives;
        for (const std::string& name : method_names())
            alternatives +=
                (alternatives.empty() ? "" : "|") + std::regex_replace(name, std::regex(R"([-:])"), R"(\$&)");
        // "name" next to == or != (directly or through QLatin1String / QStringLiteral), or a prefix test.
        const std::string lit = "(?:QLatin1String|QStringLiteral)?\\(?\"(?:" + alternatives + ")\"\\)?";
        const std::regex compare("(?:==|!=)\\s*" + lit + "|" + lit +
                                 "\\s*(?:==|!=)|rfind\\(\"(?:" + alternatives + "|kivi|varrate)");
        std::vector<std::string> hits;
        int files = 0;
        for (const char* dir : {"app", "core", "viz", "models", "base"}) {
            if (!std::filesystem::exists(root / dir)) continue;
            for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
                const auto ext = e.path().extension();
                if (ext != ".cpp" && ext != ".h") continue;
                ++files;
                std::ifstream in(e.path());
                std::string line;
                for (int n = 1; std::getline(in, line); ++n)
                    if (std::regex_search(line, compare))
                        hits.push_back(std::filesystem::relative(e.path(), root).string() + ":" +
                                       std::to_string(n) + ": " + line);
            }
        }
        QVERIFY(files > 50);
        std::string all;
        for (const auto& h : hits) all += h + "\n";
        QVERIFY2(hits.empty(), all.c_str());
        // The pattern finds what it is meant to find.
        QVERIFY(std::regex_search(std::string("if (method == QLatin1String(\"snapkv\")) x;"), compare));
        QVERIFY(std::regex_search(std::string("if (name.rfind(\"kivi\", 0) == 0)"), compare));
        QVERIFY(std::regex_search(std::string("m != \"varrate:oracle\""), compare));
        QVERIFY(!std::regex_search(std::string("const char* f = \"varrate-codec.json\";"), compare));
    }

    // The structure drawing (docs/ARCHITECTURE.md) has no arrow running back up: each layer's sources include
    // nothing of the layers above it (the pipeline nothing of its suites).
    void layers_include_only_downward() {
        const std::filesystem::path root = VARRATE_SOURCE_DIR;
        struct Layer {
            const char* dir;
            std::vector<std::string> forbidden;  // include prefixes
            const char* except = nullptr;        // a subfolder that is a layer of its own
        };
        const std::vector<Layer> layers = {
            {"base", {"models/", "codec/", "core/", "viz/", "app/"}},
            {"models", {"codec/", "core/", "viz/", "app/"}},
            {"codec", {"core/", "viz/", "app/"}},
            {"core", {"core/suites/", "viz/", "app/"}, "suites"},
            {"core/suites", {"viz/", "app/"}},
        };
        const std::regex include("^\\s*#\\s*include\\s*\"([^\"]+)\"");
        std::vector<std::string> hits;
        int files = 0;
        for (const Layer& layer : layers) {
            for (const auto& e : std::filesystem::recursive_directory_iterator(root / layer.dir)) {
                const auto ext = e.path().extension();
                if (ext != ".cpp" && ext != ".h") continue;
                const std::string rel = std::filesystem::relative(e.path(), root / layer.dir).string();
                if (layer.except && rel.rfind(std::string(layer.except) + "/", 0) == 0) continue;
                ++files;
                std::ifstream in(e.path());
                std::string line;
                std::smatch m;
                for (int n = 1; std::getline(in, line); ++n) {
                    if (!std::regex_search(line, m, include)) continue;
                    for (const std::string& f : layer.forbidden)
                        if (m[1].str().rfind(f, 0) == 0)
                            hits.push_back(std::string(layer.dir) + "/" + rel + ":" + std::to_string(n) +
                                           ": " + line);
                }
            }
        }
        QVERIFY(files > 100);
        std::string all;
        for (const auto& h : hits) all += h + "\n";
        QVERIFY2(hits.empty(), all.c_str());
    }
};

QTEST_GUILESS_MAIN(TestCodecRegistry)
#include "test_codec_registry.moc"
