#include "viz/run_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QFrame>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "codec/registry.h"
#include "core/codec_defaults.h"
#include "models/device.h"
#include "viz/run_settings.h"

namespace varrate::viz {

namespace {

QSpinBox* int_box(int lo, int hi, const QString& tip) {
    auto* b = new QSpinBox;
    b->setRange(lo, hi);
    b->setToolTip(tip);
    return b;
}

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
    // Settings scroll; Run/Cancel and the progress stay in view below them.
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->setSpacing(0);
    auto* scroll = new QScrollArea;
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    auto* content = new QWidget;
    auto* root = new QVBoxLayout(content);
    root->setContentsMargins(6, 6, 6, 6);

    // Questions and expected answers.
    auto* qbox = new QGroupBox("Questions");
    auto* ql = new QVBoxLayout(qbox);
    // The reply's start is given to the model after the question (RULER's NIAH prompts); optional.
    questions_ = new QTableWidget(0, 3);
    questions_->setObjectName("questions");
    // Short labels so that the narrow panel does not clip them; the tooltips say the rest.
    const std::pair<const char*, const char*> columns[] = {
        {"Question", "Asked after the document"},
        {"Reply starts", "The start of the reply, given to the model after the question (optional)"},
        {"Expected", "The expected answer: a reply containing it counts as correct (optional)"}};
    for (int c = 0; c < 3; ++c) {
        auto* header = new QTableWidgetItem(QString::fromUtf8(columns[c].first));
        header->setToolTip(QString::fromUtf8(columns[c].second));
        questions_->setHorizontalHeaderItem(c, header);
    }
    questions_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    questions_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
    questions_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    questions_->verticalHeader()->setVisible(false);
    questions_->setMinimumHeight(90);
    questions_->setMaximumHeight(140);
    ql->addWidget(questions_);
    auto* qbuttons = new QHBoxLayout;
    auto* add = new QPushButton("Add");
    auto* remove = new QPushButton("Remove");
    qbuttons->addWidget(add);
    qbuttons->addWidget(remove);
    qbuttons->addStretch();
    ql->addLayout(qbuttons);
    connect(add, &QPushButton::clicked, this, [this] { add_question_row({}, {}, {}); });
    connect(remove, &QPushButton::clicked, this, [this] {
        const int row = questions_->currentRow() >= 0 ? questions_->currentRow() : questions_->rowCount() - 1;
        if (row >= 0) questions_->removeRow(row);
    });
    root->addWidget(qbox);

    // Methods, by group (reference, low-rank, VarRate by signal, eviction, quantization), three columns.
    auto* mbox = new QGroupBox("Methods");
    auto* ml = new QGridLayout(mbox);
    const auto default_methods = default_method_names();
    int grid_row = 0;
    for (const MethodGroup& group : methods_by_group()) {
        auto* heading = new QLabel(QString::fromStdString(group.name));
        heading->setStyleSheet("color: palette(mid); font-size: 11px;");
        ml->addWidget(heading, grid_row++, 0, 1, 3);
        int col = 0;
        for (const std::string& name : group.methods) {
            auto* c = new QCheckBox(QString::fromStdString(name));
            c->setObjectName("method_" + QString::fromStdString(name));
            c->setToolTip(QString::fromStdString(method_description(name)));
            c->setChecked(std::find(default_methods.begin(), default_methods.end(), name) !=
                          default_methods.end());
            ml->addWidget(c, grid_row + col / 3, col % 3);
            ++col;
            methods_.push_back(c);
        }
        grid_row += (col + 2) / 3;
    }
    root->addWidget(mbox);

    // Codec settings: one editor per row of codec/settings_table.h, in its order.
    auto* cbox = new QGroupBox("Codec");
    auto* cf = new QFormLayout(cbox);
    codec_.resize(codec_setting_specs().size());
    for (size_t i = 0; i < codec_.size(); ++i) {
        CodecEditor& e = codec_[i];
        e.spec = &codec_setting_specs()[i];
        QWidget* row = make_codec_editor(e);
        if (e.flag)
            cf->addRow(row);
        else
            cf->addRow(QString::fromUtf8(e.spec->label), row);
    }
    defaults_ = new QLabel;
    defaults_->setObjectName("defaults_label");
    defaults_->setWordWrap(true);
    defaults_->setStyleSheet("color: palette(mid); font-size: 11px;");
    cf->addRow(defaults_);
    live_hint_ = new QLabel;
    live_hint_->setObjectName("live_hint");
    live_hint_->setWordWrap(true);
    live_hint_->setStyleSheet("font-size: 11px;");
    cf->addRow(live_hint_);
    root->addWidget(cbox);

    // Run settings.
    auto* rbox = new QGroupBox("Run");
    auto* rf = new QFormLayout(rbox);
    mode_ = new QComboBox;
    mode_->setObjectName("mode");
    mode_->addItems({"query-aware", "query-agnostic"});
    // Query-agnostic first (kvpress's default): the cache is compressed before the question is known, the
    // regime where the allocation has to guess what will matter.
    mode_->setCurrentText("query-agnostic");
    mode_->setToolTip(
        "query-aware: the question is part of what is compressed (one prefill per question); "
        "query-agnostic: the context alone is compressed and the question comes after");
    rf->addRow("Mode", mode_);
    device_ = new QComboBox;
    device_->setObjectName("device");
    device_->addItem("cpu");
    if (cuda_available()) device_->addItem("cuda");
    rf->addRow("Device", device_);
    dtype_ = new QComboBox;
    dtype_->setObjectName("dtype");
    rf->addRow("Dtype", dtype_);
    connect(device_, &QComboBox::currentTextChanged, this, [this] { update_dtypes(); });
    update_dtypes();
    max_new_ = int_box(1, 4096, "tokens generated per answer");
    rf->addRow("Max new tokens", max_new_);
    chat_ = new QCheckBox("Chat template");
    rf->addRow(chat_);
    basis_ = new QComboBox;
    basis_->setObjectName("basis");
    basis_->addItem("Shipped (beside the model)", "shipped");
    basis_->addItem("File…", "file");
    basis_->addItem("Calibrate now on the document", "calibrate");
    rf->addRow("Basis", basis_);
    auto* fileRow = new QHBoxLayout;
    basis_file_ = new QLineEdit;
    basis_file_->setPlaceholderText("basis .safetensors");
    basis_browse_ = new QPushButton("…");
    basis_browse_->setMaximumWidth(32);
    fileRow->addWidget(basis_file_);
    fileRow->addWidget(basis_browse_);
    rf->addRow("Basis file", fileRow);
    auto sync_basis = [this] {
        const bool file = basis_->currentData().toString() == "file";
        basis_file_->setEnabled(file);
        basis_browse_->setEnabled(file);
    };
    connect(basis_, &QComboBox::currentIndexChanged, this, sync_basis);
    sync_basis();
    connect(basis_browse_, &QPushButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, "Codec basis", basis_file_->text(),
                                                       "Basis (*.safetensors);;All files (*)");
        if (!f.isEmpty()) basis_file_->setText(f);
    });
    basis_status_ = new QLabel("basis: –");
    basis_status_->setObjectName("basis_status");
    basis_status_->setWordWrap(true);
    rf->addRow(basis_status_);
    root->addWidget(rbox);

    root->addStretch();
    scroll->setWidget(content);
    outer->addWidget(scroll, 1);

    // Run / Cancel / progress.
    auto* footer = new QFrame;
    footer->setObjectName("run_footer");
    footer->setFrameShape(QFrame::StyledPanel);
    auto* fl = new QVBoxLayout(footer);
    fl->setContentsMargins(6, 6, 6, 6);
    auto* buttons = new QHBoxLayout;
    run_ = new QPushButton("Run");
    run_->setObjectName("run_button");
    run_->setDefault(true);
    run_->setMinimumHeight(30);
    cancel_ = new QPushButton("Cancel");
    cancel_->setObjectName("cancel_button");
    cancel_->setEnabled(false);
    cancel_->setMinimumHeight(30);
    buttons->addWidget(run_, 2);
    buttons->addWidget(cancel_, 1);
    fl->addLayout(buttons);
    progress_ = new QProgressBar;
    progress_->setObjectName("progress");
    progress_->setRange(0, 1000);
    progress_->setValue(0);
    progress_->setTextVisible(false);
    progress_->setMaximumHeight(8);
    fl->addWidget(progress_);
    stage_ = new QLabel("Idle");
    stage_->setObjectName("stage_label");
    fl->addWidget(stage_);
    outer->addWidget(footer);
    connect(run_, &QPushButton::clicked, this, &RunPanel::run_requested);
    connect(cancel_, &QPushButton::clicked, this, &RunPanel::cancel_requested);

    // One change signal for every editor, so that views that show these settings (the NIAH tab) follow them.
    for (QCheckBox* c : methods_) connect(c, &QCheckBox::toggled, this, &RunPanel::settings_changed);
    connect(chat_, &QCheckBox::toggled, this, &RunPanel::settings_changed);
    connect(max_new_, &QSpinBox::valueChanged, this, &RunPanel::settings_changed);
    for (QComboBox* b : {mode_, device_, dtype_, basis_})
        connect(b, &QComboBox::currentIndexChanged, this, &RunPanel::settings_changed);
    connect(basis_file_, &QLineEdit::textChanged, this, &RunPanel::settings_changed);
    connect(questions_, &QTableWidget::cellChanged, this, &RunPanel::settings_changed);
    connect(questions_->model(), &QAbstractItemModel::rowsRemoved, this, &RunPanel::settings_changed);

    RunSettings defaults;
    defaults.codec = width_codec_defaults(0);
    set_settings(defaults);
    defaults_->setText(QString::fromStdString(describe_codec_defaults(0, std::nullopt)));
}

void RunPanel::update_dtypes() {
    const QString keep = dtype_->currentText();
    dtype_->clear();
    dtype_->addItems({"auto", "fp32", "bf16"});
    if (device_->currentText().startsWith("cuda")) dtype_->addItem("fp16");
    const int i = dtype_->findText(keep);
    dtype_->setCurrentIndex(i >= 0 ? i : 0);
}

void RunPanel::add_question_row(const QString& q, const QString& prefix, const QString& a) {
    const int row = questions_->rowCount();
    questions_->insertRow(row);
    questions_->setItem(row, 0, new QTableWidgetItem(q));
    questions_->setItem(row, 1, new QTableWidgetItem(prefix));
    questions_->setItem(row, 2, new QTableWidgetItem(a));
}

void RunPanel::set_questions(const std::vector<std::string>& questions,
                             const std::vector<std::string>& answers,
                             const std::vector<std::string>& answer_prefixes) {
    questions_->setRowCount(0);
    const auto at = [](const std::vector<std::string>& v, size_t i) {
        return i < v.size() ? QString::fromStdString(v[i]) : QString();
    };
    for (size_t i = 0; i < questions.size(); ++i)
        add_question_row(QString::fromStdString(questions[i]), at(answer_prefixes, i), at(answers, i));
}

RunSettings RunPanel::settings() const {
    RunSettings s;
    bool any_answer = false, any_prefix = false;
    for (int r = 0; r < questions_->rowCount(); ++r) {
        const auto text = [&](int c) {
            const QTableWidgetItem* it = questions_->item(r, c);
            return it ? it->text().trimmed().toStdString() : std::string();
        };
        if (text(0).empty()) continue;
        s.questions.push_back(text(0));
        s.answer_prefixes.push_back(text(1));
        s.answers.push_back(text(2));
        any_prefix = any_prefix || !text(1).empty();
        any_answer = any_answer || !text(2).empty();
    }
    if (!any_answer) s.answers.clear();  // no expected answers: correctness is not scored
    if (!any_prefix) s.answer_prefixes.clear();
    s.methods.clear();
    for (const std::string& name : method_names())  // registry order, whatever the grouping on screen
        for (const QCheckBox* c : methods_)
            if (c->isChecked() && c->text().toStdString() == name) s.methods.push_back(name);
    for (const CodecEditor& e : codec_) e.read(s.codec);
    s.mode = parse_mode(mode_->currentText().toStdString());
    s.max_new_tokens = max_new_->value();
    s.chat = chat_->isChecked();
    s.device = device_->currentText().toStdString();
    s.dtype = dtype_->currentText().toStdString();
    s.basis = parse_basis_choice(basis_->currentData().toString().toStdString());
    s.basis_file = basis_file_->text().trimmed().toStdString();
    return s;
}

void RunPanel::emit_live_change() {
    if (quiet_ == 0) Q_EMIT live_settings_changed();
}

bool RunPanel::eventFilter(QObject* watched, QEvent* e) {
    if (e->type() == QEvent::KeyPress) {
        const int key = static_cast<QKeyEvent*>(e)->key();
        if (key == Qt::Key_Return || key == Qt::Key_Enter) Q_EMIT decode_requested();
    }
    return QWidget::eventFilter(watched, e);
}

void RunPanel::set_live(bool live, const QString& hint) {
    live_ = live;
    live_hint_->setText(hint);
}

void RunPanel::set_rank_limit(int dim) {
    if (dim <= 0) return;
    for (const CodecEditor& e : codec_) {
        if (!e.spec->dim_bounded || !e.slider) continue;
        const QSignalBlocker b(e.slider);
        e.slider->setRange(static_cast<int>(e.spec->min), dim);
        e.slider->setValue(e.integer->value());
    }
}

void RunPanel::set_settings(const RunSettings& s) {
    // One change, not one per editor: a live run re-allocates once, when the caller says so.
    ++quiet_;
    set_questions(s.questions, s.answers, s.answer_prefixes);
    // Saved sessions may name a method by an old name kept as an alias (varrate-kvzip).
    std::vector<std::string> wanted;
    for (const std::string& m : s.methods)
        wanted.push_back(find_method_traits(m) ? registered_method_name(m) : m);
    for (QCheckBox* c : methods_)
        c->setChecked(std::find(wanted.begin(), wanted.end(), c->text().toStdString()) != wanted.end());
    for (const CodecEditor& e : codec_) e.show(s.codec);
    mode_->setCurrentText(QString::fromStdString(to_string(s.mode)));
    max_new_->setValue(static_cast<int>(s.max_new_tokens));
    chat_->setChecked(s.chat);
    // A saved CUDA session opened on a CPU-only machine falls back to the CPU (the combo has no "cuda").
    const int d = device_->findText(QString::fromStdString(s.device));
    device_->setCurrentIndex(d >= 0 ? d : 0);
    update_dtypes();
    const int t = dtype_->findText(QString::fromStdString(s.dtype));
    dtype_->setCurrentIndex(t >= 0 ? t : 0);
    basis_->setCurrentIndex(std::max(0, basis_->findData(QString::fromStdString(to_string(s.basis)))));
    basis_file_->setText(QString::fromStdString(s.basis_file));
    --quiet_;
}

void RunPanel::apply_model_defaults(const CodecSettings& defaults, bool recorded,
                                    const QString& description) {
    (void)recorded;  // a recorded file and the width-based defaults set the same rows
    RunSettings s = settings();
    // The settings the table marks as the model's change; the others are a regime the user picked.
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (spec.model_default) set_setting_value(spec, s.codec, setting_value(spec, defaults));
    set_settings(s);
    defaults_->setText(description);
}

QString RunPanel::live_hint() const {
    return live_hint_->text();
}

QString RunPanel::defaults_text() const {
    return defaults_->text();
}

void RunPanel::set_basis_status(const QString& source, bool self_calibrated) {
    self_calibrated_ = self_calibrated;
    if (self_calibrated)
        basis_status_->setText(
            "basis: <b style='color:#EBB839'>self-calibrated</b> on the document (no shipped basis)");
    else
        basis_status_->setText("basis: " + (source.isEmpty() ? QString("–") : source.toHtmlEscaped()));
}

void RunPanel::set_running(bool running) {
    running_ = running;
    run_->setEnabled(!running);
    cancel_->setEnabled(running);
    if (running) {
        current_method_.clear();
        progress_->setValue(0);
        stage_->setText("Starting…");
    }
}

void RunPanel::set_progress(const QString& stage, qint64 done, qint64 total) {
    QString text;
    if (stage.startsWith("compress ")) current_method_ = stage.mid(9);
    if (stage == "load")
        text = QString("Loading model (%1/%2)").arg(done).arg(total);
    else if (stage == "prefill")
        text = QString("%1 prefill: layer step %2/%3")
                   .arg(current_method_.isEmpty() ? QString() : current_method_ + " ·")
                   .arg(done)
                   .arg(total)
                   .trimmed();
    else if (stage.startsWith("compress "))
        text = QString("Compressing with %1 (method %2/%3)").arg(current_method_).arg(done + 1).arg(total);
    else if (stage == "calibrate")
        text = QString("Calibrating basis (%1/%2)").arg(done).arg(total);
    else if (stage == "done")
        text = "Done";
    else if (total <= 0)
        text = stage;
    else
        text = QString("%1 (%2/%3)").arg(stage).arg(done).arg(total);
    stage_->setText(text);
    if (total > 0)
        progress_->setValue(static_cast<int>(1000 * std::clamp<double>(double(done) / total, 0, 1)));
}

QString RunPanel::stage_text() const {
    return stage_->text();
}

QWidget* RunPanel::CodecEditor::widget() const {
    if (real) return real;
    if (integer) return integer;
    if (choice) return choice;
    if (text) return text;
    return flag;
}

void RunPanel::CodecEditor::read(CodecSettings& s) const {
    if (text) {
        try {
            listed = parse_setting_list(*spec, text->text().toStdString(), spec->label);
            text->setStyleSheet(QString());
            text->setToolTip(QString::fromUtf8(spec->help));
        } catch (const Error& e) {
            text->setStyleSheet("color: #c0392b");
            text->setToolTip(QString::fromStdString(e.what()));
        }
        s.*(spec->list) = listed;
        return;
    }
    const double v = real      ? real->value()
                     : integer ? integer->value()
                     : choice  ? choice->currentData().toDouble()
                               : (flag->isChecked() ? 1.0 : 0.0);
    set_setting_value(*spec, s, v);
}

void RunPanel::CodecEditor::show(const CodecSettings& s) const {
    if (text) {
        listed = s.*(spec->list);
        text->setText(QString::fromStdString(format_setting(*spec, s)));
        return;
    }
    const double v = setting_value(*spec, s);
    if (real)
        real->setValue(v);
    else if (integer)
        integer->setValue(static_cast<int>(std::lround(v)));
    else if (choice)  // any other value was refused when the settings were read (codec_json)
        choice->setCurrentIndex(std::max(0, choice->findData(static_cast<int>(std::lround(v)))));
    else
        flag->setChecked(v != 0.0);
}

QWidget* RunPanel::make_codec_editor(CodecEditor& e) {
    const CodecSettingSpec& spec = *e.spec;
    const QString tip = QString::fromUtf8(spec.help);
    const auto clamp_int = [](double v) { return static_cast<int>(std::min<double>(v, 1 << 24)); };
    switch (spec.kind) {
        case SettingKind::Fraction:
            e.real = new QDoubleSpinBox;
            e.real->setDecimals(3);
            e.real->setRange(spec.min + 0.01, spec.max);  // the box's smallest step above the open end
            e.real->setSingleStep(0.05);
            break;
        case SettingKind::Integer:
            e.integer = new QSpinBox;
            e.integer->setRange(clamp_int(spec.min), clamp_int(spec.max));
            break;
        case SettingKind::Choice:
            e.choice = new QComboBox;
            for (int64_t c : spec.choices) e.choice->addItem(QString::number(c), static_cast<int>(c));
            break;
        case SettingKind::Flag:
            e.flag = new QCheckBox(QString::fromUtf8(spec.label));
            break;
        case SettingKind::List:
            e.text = new QLineEdit;
            e.text->setPlaceholderText("none (comma-separated)");
            break;
    }
    QWidget* editor = e.widget();
    editor->setObjectName(QString::fromUtf8(spec.key));
    editor->setToolTip(tip);
    // Every setting that changes a number is live once a run is kept (the tier says at what cost); Enter in
    // a box asks for the answers at once.
    const bool live = spec.tier != SettingTier::Runtime;
    const auto changed = [this, live] {
        Q_EMIT settings_changed();
        if (live) emit_live_change();
    };
    if (e.real) connect(e.real, &QDoubleSpinBox::valueChanged, this, changed);
    if (e.integer) connect(e.integer, &QSpinBox::valueChanged, this, changed);
    if (e.choice) connect(e.choice, &QComboBox::currentIndexChanged, this, changed);
    if (e.flag) connect(e.flag, &QCheckBox::toggled, this, changed);
    if (e.text) connect(e.text, &QLineEdit::editingFinished, this, changed);
    if (auto* box = qobject_cast<QAbstractSpinBox*>(editor)) box->installEventFilter(this);
    if (!spec.slider) return editor;

    // Slider and box move together; a Fraction's slider counts thousandths.
    e.slider = new QSlider(Qt::Horizontal);
    e.slider->setObjectName(QString::fromUtf8(spec.key) + "_slider");
    if (e.real) {
        e.slider->setRange(static_cast<int>(std::lround(e.real->minimum() * 1000)),
                           static_cast<int>(std::lround(spec.max * 1000)));
        QDoubleSpinBox* box = e.real;
        QSlider* slider = e.slider;
        connect(slider, &QSlider::valueChanged, box, [box](int v) { box->setValue(v / 1000.0); });
        connect(box, &QDoubleSpinBox::valueChanged, slider, [slider](double v) {
            const QSignalBlocker b(slider);
            slider->setValue(static_cast<int>(std::lround(v * 1000)));
        });
    } else {
        // Until a model says its D (set_rank_limit): the paper's widths.
        e.slider->setRange(clamp_int(spec.min), spec.dim_bounded && spec.min == 0 ? 128 : 1024);
        QSpinBox* box = e.integer;
        QSlider* slider = e.slider;
        connect(slider, &QSlider::valueChanged, box, &QSpinBox::setValue);
        connect(box, &QSpinBox::valueChanged, slider, [slider](int v) {
            const QSignalBlocker b(slider);
            slider->setValue(v);
        });
    }
    auto* row = new QWidget;
    auto* l = new QHBoxLayout(row);
    l->setContentsMargins(0, 0, 0, 0);
    l->addWidget(e.slider, 1);
    editor->setMinimumWidth(76);
    l->addWidget(editor);
    return row;
}

const RunPanel::CodecEditor* RunPanel::find_codec_editor(const std::string& key) const {
    for (const CodecEditor& e : codec_)
        if (key == e.spec->key) return &e;
    return nullptr;
}

QWidget* RunPanel::codec_editor(const std::string& key) const {
    const CodecEditor* e = find_codec_editor(key);
    return e ? e->widget() : nullptr;
}

QSlider* RunPanel::codec_slider(const std::string& key) const {
    const CodecEditor* e = find_codec_editor(key);
    return e ? e->slider : nullptr;
}

QDoubleSpinBox* RunPanel::budget_box() const {
    return qobject_cast<QDoubleSpinBox*>(codec_editor("budget"));
}

QSpinBox* RunPanel::r_min_box() const {
    return qobject_cast<QSpinBox*>(codec_editor("r_min"));
}

QSpinBox* RunPanel::rank_box() const {
    return qobject_cast<QSpinBox*>(codec_editor("rank"));
}

QComboBox* RunPanel::coef_bits_box() const {
    return qobject_cast<QComboBox*>(codec_editor("coef_bits"));
}

}  // namespace varrate::viz
