#include "tests/test_support.h"

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "core/prompt.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

using nlohmann::json;
using varrate::ChatFormat;
using varrate::ChatMessage;
using varrate::render_chat;
using varrate::Tokenizer;

namespace {

std::vector<ChatMessage> messages_of(const json& j) {
    std::vector<ChatMessage> out;
    for (const auto& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    return out;
}

QString q(const std::string& s) {
    return QString::fromStdString(s);
}

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// tests/data/oracles/chat_llama31.json: transformers' apply_chat_template on Meta's Llama-3.1-8B-Instruct
// template (tests/data/chat/llama31_chat_template.jinja), made by scripts/oracles/generate.sh --only chat31.
json llama31_reference() {
    return varrate::test::read_json(varrate::test::oracle_dir() / "chat_llama31.json");
}

// A case's apply_chat_template keyword arguments and tools as our options.
varrate::ChatOptions options_of(const json& c) {
    varrate::ChatOptions o;
    const json& kw = c["template_kwargs"];
    if (kw.contains("date_string")) o.date_string = kw["date_string"].get<std::string>();
    if (kw.contains("tools_in_user_message"))
        o.tools_in_user_message = kw["tools_in_user_message"].get<bool>();
    if (!c["tools_json"].is_null()) o.tools = c["tools_json"].get<std::vector<std::string>>();
    return o;
}

// The llama3 fixture tokenizer with the Llama-3.1 template beside it (chat_template.jinja, as newer
// checkpoints keep it) instead of its own 3.0 template; "" when the fixture is absent.
std::filesystem::path llama31_tokenizer_dir() {
    const auto fixture = varrate::test::fixture("tokenizers/llama3/tokenizer.json");
    if (fixture.empty()) return {};
    const auto dir = varrate::test::temp_dir("llama31-tokenizer");
    std::filesystem::copy_file(fixture, dir / "tokenizer.json");
    json config = varrate::test::read_json(fixture.parent_path() / "tokenizer_config.json");
    config.erase("chat_template");
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    std::filesystem::copy_file(varrate::test::source_dir() / "tests/data/chat/llama31_chat_template.jinja",
                               dir / "chat_template.jinja");
    return dir;
}

// The Qwen2.5 template (tools branch shortened): a literal default system prompt when none is given.
const char* const kQwen25Template = R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "<|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})TPL";

const char* const kMistralV02Template =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
    "%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles "
    "are supported!') }}{% endif %}{% endfor %}";

}  // namespace

class TestChatTemplate : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    // chat.jsonl: the rendering and the ids of encode(rendered, add_special_tokens=false).
    void fixture_chats_data() {
        QTest::addColumn<QString>("family");
        QTest::newRow("llama3") << "llama3";
        QTest::newRow("qwen3") << "qwen3";
    }
    void fixture_chats() {
        QFETCH(QString, family);
        VARRATE_REQUIRE_FIXTURE(chat, "tokenizers/" + varrate::test::utf8(family) + "/chat.jsonl");
        const Tokenizer tok = Tokenizer::load(chat.parent_path());
        const ChatFormat expected_format = family == "llama3" ? ChatFormat::Llama3 : ChatFormat::Qwen3;
        QCOMPARE(q(to_string(varrate::detect_chat_format(tok.chat_template()))),
                 q(to_string(expected_format)));
        const auto rows = varrate::test::read_jsonl(chat);
        QCOMPARE(rows.size(), size_t{3});
        for (const json& row : rows) {
            QVERIFY(row["add_generation_prompt"].get<bool>());
            const std::string rendered = render_chat(tok, messages_of(row["messages"]), true);
            QCOMPARE(q(rendered), q(row["rendered"].get<std::string>()));
            QCOMPARE(q(json(tok.encode(rendered, false)).dump()), q(row["ids"].dump()));
        }
    }

    void detection() {
        QCOMPARE(varrate::detect_chat_format(""), ChatFormat::Plain);
        QCOMPARE(varrate::detect_chat_format(kQwen25Template), ChatFormat::ChatML);
        QCOMPARE(varrate::detect_chat_format(kMistralV02Template), ChatFormat::Mistral);
        QCOMPARE(varrate::detect_chat_format("{{ '<|im_start|>' }}{% if enable_thinking %}"),
                 ChatFormat::Qwen3);
        QCOMPARE(q(varrate::detect_chat_style(kQwen25Template).default_system_prompt),
                 QString("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
        QVERIFY(!varrate::detect_chat_style(kMistralV02Template).mistral_space_after_eos);
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3/tokenizer_config.json");
        const Tokenizer tok = Tokenizer::load(qwen3.parent_path());
        QCOMPARE(q(varrate::detect_chat_style(tok.chat_template()).default_system_prompt), QString());
    }

    // Expected strings below are the Jinja renderings of the real templates (transformers' settings).
    void mistral_format() {
        const std::vector<ChatMessage> msgs = {
            {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you?"}};
        const auto style = varrate::detect_chat_style(kMistralV02Template);
        QCOMPARE(q(render_chat(ChatFormat::Mistral, msgs, true, "<s>", "</s>", style)),
                 QString("<s>[INST] Hello [/INST]Hi there</s>[INST] Who are you? [/INST]"));
        // Mistral-7B-Instruct-v0.1 puts a space after each eos.
        varrate::ChatStyle v01;
        v01.mistral_space_after_eos = true;
        QCOMPARE(q(render_chat(ChatFormat::Mistral, msgs, true, "<s>", "</s>", v01)),
                 QString("<s>[INST] Hello [/INST]Hi there</s> [INST] Who are you? [/INST]"));
        QCOMPARE(q(render_chat(ChatFormat::Mistral, {{"system", "Be brief."}, {"user", "Hi"}}, true, "<s>",
                               "</s>")),
                 QString("<s>[INST] Be brief.\n\nHi [/INST]"));
        EXPECT_ERROR(render_chat(ChatFormat::Mistral, {{"user", "a"}, {"user", "b"}}, true, "<s>", "</s>"),
                     "alternate");
        EXPECT_ERROR(render_chat(ChatFormat::Mistral, {{"tool", "a"}}, true, "<s>", "</s>"), "role 'tool'");
    }

    void chatml_default_system() {
        const auto style = varrate::detect_chat_style(kQwen25Template);
        QCOMPARE(q(render_chat(ChatFormat::ChatML, {{"user", "Hi"}}, true, "", "<|im_end|>", style)),
                 QString("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                         "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
        QCOMPARE(
            q(render_chat(ChatFormat::ChatML, {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, false,
                          "", "<|im_end|>", style)),
            QString("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                    "Yo<|im_end|>\n"));
    }

    void qwen3_reasoning_and_tools() {
        // Reasoning of an earlier turn is dropped; the generation prompt disables thinking.
        QCOMPARE(
            q(render_chat(ChatFormat::Qwen3,
                          {{"system", "Be brief."},
                           {"user", "Q1"},
                           {"assistant", "<think>\nplan\n</think>\n\nA1"},
                           {"user", "Q2"}},
                          true, "", "")),
            QString(
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>"
                "assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                "</think>\n\n"));
        // The final assistant turn keeps its (newline-trimmed) reasoning.
        QCOMPARE(q(render_chat(ChatFormat::Qwen3,
                               {{"user", "Q1"}, {"assistant", "<think>\n\nr1\n\n</think>\n\n\nA1"}}, false,
                               "", "")),
                 QString("<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</"
                         "think>\n\nA1<|im_end|>\n"));
        QCOMPARE(
            q(render_chat(ChatFormat::Qwen3,
                          {{"user", "Q"},
                           {"assistant", "calling"},
                           {"tool", "r1"},
                           {"tool", "r2"},
                           {"assistant", "done"}},
                          true, "", "")),
            QString(
                "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n<|im_start|>user\n"
                "<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</"
                "think>\n\ndone<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                "</think>\n\n"));
    }

    void llama3_trims_content() {
        QCOMPARE(q(render_chat(ChatFormat::Llama3, {{"system", "  sys \n"}, {"user", "\tHi there  "}}, false,
                               "<|begin_of_text|>", "<|eot_id|>")),
                 QString("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|><|"
                         "start_header_id|>"
                         "user<|end_header_id|>\n\nHi there<|eot_id|>"));
    }

    // Every rendering of the oracle, character for character (no fixture needed).
    void llama31_oracle_renderings() {
        const json ref = llama31_reference();
        const auto tpl_path = varrate::test::source_dir() / ref["template"].get<std::string>();
        QCOMPARE(q(varrate::test::sha256_hex(tpl_path)), q(ref["template_sha256"].get<std::string>()));
        const std::string tpl = read_text(tpl_path);
        QCOMPARE(varrate::detect_chat_format(tpl), ChatFormat::Llama31);
        QCOMPARE(q(to_string(ChatFormat::Llama31)), QString("llama3.1"));
        QVERIFY(ref["cases"].size() >= 10);
        for (const json& c : ref["cases"]) {
            const std::string rendered =
                render_chat(ChatFormat::Llama31, messages_of(c["messages"]),
                            c["add_generation_prompt"].get<bool>(), ref["bos_token"].get<std::string>(),
                            "<|eot_id|>", varrate::detect_chat_style(tpl), options_of(c));
            if (rendered != c["rendered"].get<std::string>())
                qWarning("case %s differs", c["name"].get<std::string>().c_str());
            QCOMPARE(q(rendered), q(c["rendered"].get<std::string>()));
        }
    }

    // The same through a tokenizer whose template is Llama-3.1's (detected from it), and the ids.
    void llama31_oracle_ids() {
        VARRATE_REQUIRE_FIXTURE(fixture_tok, "tokenizers/llama3/tokenizer.json");
        const json ref = llama31_reference();
        QCOMPARE(q(varrate::test::sha256_hex(fixture_tok)), q(ref["tokenizer_sha256"].get<std::string>()));
        const Tokenizer tok = Tokenizer::load(llama31_tokenizer_dir());
        QCOMPARE(varrate::detect_chat_format(tok.chat_template()), ChatFormat::Llama31);
        for (const json& c : ref["cases"]) {
            const std::string rendered = render_chat(tok, messages_of(c["messages"]),
                                                     c["add_generation_prompt"].get<bool>(), options_of(c));
            QCOMPARE(q(rendered), q(c["rendered"].get<std::string>()));
            QCOMPARE(q(json(tok.encode(rendered, false)).dump()), q(c["ids"].dump()));
        }
        // The 3.0 template of the same fixture stays Llama3.
        QCOMPARE(varrate::detect_chat_format(Tokenizer::load(fixture_tok.parent_path()).chat_template()),
                 ChatFormat::Llama3);
    }

    void llama31_errors_and_prompt_split() {
        const json ref = llama31_reference();
        varrate::ChatOptions tools;
        tools.tools = std::vector<std::string>{R"({"name": "f"})"};
        // The template's raise_exception; ours names the same condition.
        EXPECT_ERROR(
            render_chat(ChatFormat::Llama31, {{"system", "S"}}, true, "<|begin_of_text|>", "", {}, tools),
            "no first user message");
        QVERIFY(ref["tools_without_user_message_error"].get<std::string>().find("no first user message") !=
                std::string::npos);
        EXPECT_ERROR(render_chat(ChatFormat::Llama3, {{"user", "Hi"}}, true, "", "", {}, tools),
                     "only by the Llama-3.1 format");
        EXPECT_ERROR(render_chat(ChatFormat::Llama31, {}, true, "", ""), "at least one message");
        tools.tools = std::vector<std::string>{"{not json"};
        EXPECT_ERROR(render_chat(ChatFormat::Llama31, {{"user", "Hi"}}, true, "", "", {}, tools),
                     "not valid JSON");
        // A date given for a template without one changes nothing.
        varrate::ChatOptions dated;
        dated.date_string = "01 Jan 2030";
        QCOMPARE(q(render_chat(ChatFormat::Llama3, {{"user", "Hi"}}, true, "<s>", "", {}, dated)),
                 q(render_chat(ChatFormat::Llama3, {{"user", "Hi"}}, true, "<s>", "")));
        QCOMPARE(q(varrate::python_json_dumps(R"({"b": [1, 2.0, {}], "a": "\u00e9\n"})")),
                 QString::fromUtf8("{\"b\": [1, 2.0, {}], \"a\": \"\u00e9\\n\"}"));

        // build_prompt splits a Llama-3.1 rendering: the context part and the question part make the whole
        // prompt.
        const auto dir = llama31_tokenizer_dir();
        if (dir.empty()) QSKIP("reference fixture 'tokenizers/llama3/tokenizer.json' not found");
        const Tokenizer tok = Tokenizer::load(dir);
        const auto parts = varrate::build_prompt(tok, "The key is 7.", "What is the key?", true);
        std::vector<int64_t> joined = parts.context_ids;
        joined.insert(joined.end(), parts.question_ids.begin(), parts.question_ids.end());
        const std::string whole = render_chat(tok, {{"user", "The key is 7.\n\nWhat is the key?"}}, true);
        QVERIFY(whole.find("Today Date: 26 Jul 2024") != std::string::npos);
        QCOMPARE(q(tok.decode(joined, false)), q(whole));
        QCOMPARE(q(json(parts.context_ids).dump()),
                 q(json(tok.encode(whole.substr(0, whole.find("The key is 7.") + 13), false)).dump()));
    }

    void plain_without_template() {
        VARRATE_REQUIRE_FIXTURE(dir, "tokenizers/mistral-like-32k");
        const Tokenizer tok = Tokenizer::load(dir);
        QCOMPARE(tok.chat_template(), std::string());
        QCOMPARE(q(render_chat(tok, {{"user", "Once upon"}, {"assistant", "a time"}}, true)),
                 QString("Once upon\na time"));
    }
};

QTEST_GUILESS_MAIN(TestChatTemplate)
#include "test_models_chat_template.moc"
