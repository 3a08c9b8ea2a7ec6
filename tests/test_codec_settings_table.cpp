// The codec's settings table (codec/settings_table.h) against an independent list of CodecSettings' fields:
// every field is one row, the JSON form round-trips every one of them, each row's check refuses what it
// should, and the tiers say what a change costs. Removing a row fails the first two tests.
#include "tests/test_support.h"

#include <set>

#include "base/error.h"
#include "codec/codec_json.h"
#include "codec/method.h"
#include "codec/settings_table.h"

using namespace varrate;

namespace {

// Each field of CodecSettings set away from its default, written by hand (not from the table).
CodecSettings every_field_changed() {
    CodecSettings s;
    s.budget = 0.37;
    s.r_min = 5;
    s.rank = 77;
    s.stride = 9;
    s.anchors = 3;
    s.window = 11;
    s.obs_window = 13;
    s.pool_kernel = 7;
    s.coef_bits = 4;
    s.key_channel_ratio = 0.25;
    s.layer_profile = {0.75, 0.25, 1.5};
    s.streaming_sink = 17;
    s.streaming_recent = 33;
    s.select_tokens = 512;
    s.landmark_chunk = 32;
    s.paper_accounting = true;
    s.precise_timing = true;
    return s;
}

const std::vector<std::string> kFields = {"budget",
                                          "r_min",
                                          "rank",
                                          "stride",
                                          "anchors",
                                          "window",
                                          "obs_window",
                                          "pool_kernel",
                                          "coef_bits",
                                          "key_channel_ratio",
                                          "layer_profile",
                                          "streaming_sink",
                                          "streaming_recent",
                                          "select_tokens",
                                          "landmark_chunk",
                                          "paper_accounting",
                                          "precise_timing"};

CodecSettings from_json_field(const char* key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::object();
    j[key] = value;
    return codec_settings_from_json(j, "f.json");
}

}  // namespace

class TestSettingsTable : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    // One row per field, with a distinct key and flag, help and a label.
    void every_field_is_one_row() {
        QCOMPARE(codec_setting_specs().size(), kFields.size());
        std::set<std::string> keys, flags;
        for (const CodecSettingSpec& spec : codec_setting_specs()) {
            QVERIFY2(keys.insert(spec.key).second, spec.key);
            QVERIFY2(flags.insert(spec.flag).second, spec.flag);
            QVERIFY2(std::string(spec.flag).rfind("--", 0) == 0, spec.flag);
            QVERIFY2(std::string(spec.help).size() > 10, spec.key);
            QVERIFY2(std::string(spec.label).size() > 0, spec.key);
            QVERIFY2((spec.real != nullptr) + (spec.integer != nullptr) + (spec.boolean != nullptr) +
                             (spec.list != nullptr) ==
                         1,
                     spec.key);
            QVERIFY2((spec.list != nullptr) == (spec.kind == SettingKind::List), spec.key);
        }
        for (const std::string& f : kFields) QVERIFY2(find_codec_setting(f) != nullptr, f.c_str());
        // Each field alone is named as the difference from the defaults.
        const CodecSettings changed = every_field_changed();
        for (const CodecSettingSpec& spec : codec_setting_specs()) {
            CodecSettings one;
            if (spec.list)
                one.*(spec.list) = changed.*(spec.list);
            else
                set_setting_value(spec, one, setting_value(spec, changed));
            const std::string diff = setting_difference(one, CodecSettings{}, SettingTier::Runtime);
            QVERIFY2(diff.rfind(std::string(spec.key) + " ", 0) == 0, diff.c_str());
        }
    }

    // The JSON form carries every field there and back.
    void json_round_trips_every_field() {
        const CodecSettings s = every_field_changed();
        const nlohmann::json j = to_json(s);
        QCOMPARE(j.size(), kFields.size());
        const CodecSettings back = codec_settings_from_json(j, "test");
        QCOMPARE(back.budget, s.budget);
        QCOMPARE(back.r_min, s.r_min);
        QCOMPARE(back.rank, s.rank);
        QCOMPARE(back.stride, s.stride);
        QCOMPARE(back.anchors, s.anchors);
        QCOMPARE(back.window, s.window);
        QCOMPARE(back.obs_window, s.obs_window);
        QCOMPARE(back.pool_kernel, s.pool_kernel);
        QCOMPARE(back.coef_bits, s.coef_bits);
        QCOMPARE(back.key_channel_ratio, s.key_channel_ratio);
        QCOMPARE(back.layer_profile, s.layer_profile);
        QCOMPARE(back.streaming_sink, s.streaming_sink);
        QCOMPARE(back.streaming_recent, s.streaming_recent);
        QCOMPARE(back.select_tokens, s.select_tokens);
        QCOMPARE(back.landmark_chunk, s.landmark_chunk);
        QCOMPARE(back.paper_accounting, s.paper_accounting);
        QCOMPARE(back.precise_timing, s.precise_timing);
        QVERIFY(setting_difference(back, s, SettingTier::Runtime).empty());
        // An empty list is not written (settings made before the row read the same), and reads back empty.
        QVERIFY(!to_json(CodecSettings{}).contains("layer_profile"));
        QVERIFY(codec_settings_from_json(to_json(CodecSettings{}), "t").layer_profile.empty());
        // Rows added after references were made are written only when set, so that those read the same.
        for (const char* key : {"select_tokens", "landmark_chunk"}) {
            QVERIFY(find_codec_setting(key)->omit_default);
            QVERIFY(!to_json(CodecSettings{}).contains(key));
        }
        CodecSettings selective;
        selective.select_tokens = 1024;
        QCOMPARE(to_json(selective).value("select_tokens", int64_t{0}), int64_t{1024});
        QVERIFY(!to_json(selective).contains("landmark_chunk"));
    }

    // A list row: its text form, each entry checked and named, in JSON as on the command line.
    void list_rows_parse_and_check_each_entry() {
        const CodecSettingSpec& spec = *find_codec_setting("layer_profile");
        QCOMPARE(spec.kind, SettingKind::List);
        QCOMPARE(parse_setting_list(spec, " 0.75, 0.25 ,2", "--layer-profile"),
                 (std::vector<double>{0.75, 0.25, 2.0}));
        QVERIFY(parse_setting_list(spec, "", "x").empty());
        EXPECT_ERROR(parse_setting_list(spec, "0.5,0,1", "--layer-profile"),
                     "--layer-profile: \"layer_profile\" entry 2 must be a number in (0,", "got \"0\"");
        EXPECT_ERROR(parse_setting_list(spec, "0.5,,1", "--layer-profile"), "entry 2");
        EXPECT_ERROR(parse_setting_list(spec, "0.5,abc", "--layer-profile"), "entry 2", "\"abc\"");
        EXPECT_ERROR(from_json_field("layer_profile", nlohmann::json::array({0.5, -1})),
                     "f.json: \"layer_profile\" entry 2 must be", "-1");
        EXPECT_ERROR(from_json_field("layer_profile", 0.5), "\"layer_profile\" must be an array");
        CodecSettings bad;
        bad.layer_profile = {1.0, 0.0};
        EXPECT_ERROR(check_codec_settings(bad, "s"), "s: \"layer_profile\" entry 2 must be", "got 0");
        CodecSettings s;
        s.layer_profile = {0.75, 0.25};
        QCOMPARE(QString::fromStdString(format_setting(spec, s)), QString("0.75,0.25"));
        EXPECT_ERROR(setting_value(spec, s), "no single value");
    }

    // One check per row, with one message form, from JSON as from code.
    void each_row_checks_its_values() {
        EXPECT_ERROR(check_budget(1.5, "here"), "here: \"budget\" must be a number in (0, 1], got 1.5");
        EXPECT_ERROR(check_budget(0.0, "here"), "must be a number in (0, 1]");
        check_budget(1.0, "here");
        const CodecSettingSpec& bits = *find_codec_setting("coef_bits");
        QCOMPARE(QString::fromStdString(setting_violation(bits, 5)), QString("2, 3, 4, 8 or 16"));
        QVERIFY(setting_violation(bits, 3).empty());
        const CodecSettingSpec& rmin = *find_codec_setting("r_min");
        QVERIFY(!setting_violation(rmin, -1).empty());
        QVERIFY(!setting_violation(rmin, 2.5).empty());
        QVERIFY(setting_violation(rmin, 0).empty());
        EXPECT_ERROR(from_json_field("window", -1), "f.json: \"window\" must be an integer", "got -1");
        EXPECT_ERROR(from_json_field("stride", 2.5), "\"stride\" must be an integer");
        EXPECT_ERROR(from_json_field("coef_bits", 5), "\"coef_bits\" must be 2, 3, 4, 8 or 16");
        EXPECT_ERROR(from_json_field("paper_accounting", 1), "must be true or false");
        EXPECT_ERROR(from_json_field("rmin", 3), "unknown field \"rmin\"", "r_min");
        check_codec_settings(every_field_changed(), "s");
        CodecSettings bad;
        bad.anchors = 0;
        EXPECT_ERROR(check_codec_settings(bad, "s"), "s: \"anchors\" must be an integer in [1, 64], got 0");
    }

    // What a change costs: the tier of the costliest row that changed.
    void tiers_say_what_a_change_costs() {
        const CodecSettings base;
        auto with = [&](const char* key, double v) {
            CodecSettings s = base;
            set_setting_value(*find_codec_setting(key), s, v);
            return s;
        };
        QCOMPARE(update_tier(base, base), SettingTier::Runtime);
        QCOMPARE(update_tier(base, with("precise_timing", 1)), SettingTier::Runtime);
        QCOMPARE(update_tier(base, with("budget", 0.5)), SettingTier::Budget);
        QCOMPARE(update_tier(base, with("r_min", 3)), SettingTier::Allocation);
        QCOMPARE(update_tier(base, with("coef_bits", 4)), SettingTier::Allocation);
        CodecSettings profiled = base;
        profiled.layer_profile = {1.0, 2.0};
        QCOMPARE(update_tier(base, profiled), SettingTier::Allocation);
        QCOMPARE(update_tier(base, with("rank", 64)), SettingTier::Analysis);
        QCOMPARE(update_tier(base, with("paper_accounting", 1)), SettingTier::Analysis);
        for (const char* key : {"stride", "anchors", "window", "obs_window", "pool_kernel"}) {
            const CodecSettings s = with(key, 3);
            QCOMPARE(update_tier(base, s), SettingTier::Structural);
            QVERIFY(structural_difference(base, s).rfind(key, 0) == 0);
        }
        QVERIFY(structural_difference(base, with("rank", 64)).empty());  // allocate() reads R
    }

    void one_budget_grid() {
        const std::vector<double>& g = default_budget_grid();
        QVERIFY(g.size() >= 8);
        for (size_t i = 0; i < g.size(); ++i) {
            check_budget(g[i], "grid");
            if (i > 0) QVERIFY(g[i] > g[i - 1]);
        }
    }
};

QTEST_GUILESS_MAIN(TestSettingsTable)
#include "test_codec_settings_table.moc"
