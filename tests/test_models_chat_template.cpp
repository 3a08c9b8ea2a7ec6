#include "tests/test_support.h"

#include "core/base/error.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"

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
