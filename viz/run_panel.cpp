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

namespace varrate::viz {

CompareRequest RunSettings::request(const std::string& context) const {
    CompareRequest r;
    r.context = context;
    r.questions = questions;
    r.answers = answers;
    r.answer_prefixes = answer_prefixes;
    r.methods = methods;
    r.settings = codec;
    r.mode = mode;
    r.max_new_tokens = max_new_tokens;
    r.chat = chat;
    return r;
}

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

    // Methods.
    auto* mbox = new QGroupBox("Methods");
    auto* ml = new QGridLayout(mbox);
    const auto names = method_names();
    for (size_t i = 0; i < names.size(); ++i) {
        auto* c = new QCheckBox(QString::fromStdString(names[i]));
        c->setObjectName("method_" + QString::fromStdString(names[i]));
        c->setToolTip(QString::fromStdString(method_description(names[i])));
        const auto defaults = default_method_names();
        c->setChecked(std::find(defaults.begin(), defaults.end(), names[i]) != defaults.end());
        ml->addWidget(c, static_cast<int>(i) / 2, static_cast<int>(i) % 2);
        methods_.push_back(c);
    }
    root->addWidget(mbox);

    // Codec settings.
    auto* cbox = new QGroupBox("Codec");
    auto* cf = new QFormLayout(cbox);
    budget_ = new QDoubleSpinBox;
    budget_->setObjectName("budget");
    budget_->setRange(0.01, 1.0);
    budget_->setSingleStep(0.05);
    budget_->setDecimals(3);
    budget_->setToolTip("kappa: fraction of the full cache kept");
    r_min_ = int_box(0, 65536, "rank floor of every coded token");
    rank_ = int_box(1, 1 << 20, "R: basis rank and per-token rank cap (clamped to D)");
    // kappa, r_min and R are live after a run: slider and spin box move together, and every step
    // re-allocates the kept run (live_settings_changed). Slider units: kappa in thousandths.
    kappa_slider_ = new QSlider(Qt::Horizontal);
    kappa_slider_->setObjectName("kappa_slider");
    kappa_slider_->setRange(10, 1000);
    r_min_slider_ = new QSlider(Qt::Horizontal);
    r_min_slider_->setObjectName("r_min_slider");
    r_min_slider_->setRange(0, 128);
    rank_slider_ = new QSlider(Qt::Horizontal);
    rank_slider_->setObjectName("rank_slider");
    rank_slider_->setRange(1, 1024);
    const auto slider_row = [](QSlider* slider, QWidget* box) {
        auto* row = new QWidget;
        auto* l = new QHBoxLayout(row);
        l->setContentsMargins(0, 0, 0, 0);
        l->addWidget(slider, 1);
        box->setMinimumWidth(76);
        l->addWidget(box);
        return row;
    };
    connect(kappa_slider_, &QSlider::valueChanged, this, [this](int v) { budget_->setValue(v / 1000.0); });
    connect(budget_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
        const QSignalBlocker b(kappa_slider_);
        kappa_slider_->setValue(static_cast<int>(std::lround(v * 1000)));
    });
    for (auto [slider, box] : {std::pair{r_min_slider_, r_min_}, std::pair{rank_slider_, rank_}}) {
        connect(slider, &QSlider::valueChanged, box, &QSpinBox::setValue);
        connect(box, &QSpinBox::valueChanged, slider, [slider](int v) {
            const QSignalBlocker b(slider);
            slider->setValue(v);
        });
    }
    cf->addRow("Budget κ", slider_row(kappa_slider_, budget_));
    stride_ = int_box(1, 1 << 20, "Δ: anchors at 0, Δ, 2Δ, ... are stored exactly");
    anchors_ = int_box(1, 64, "c: a coded token is predicted by the mean of its c nearest anchors");
    window_ = int_box(0, 1 << 20, "w: the last w tokens are stored exactly");
    obs_window_ = int_box(1, 1 << 20, "w_obs: queries of the last w_obs tokens score salience");
    pool_kernel_ = int_box(1, 255, "SnapKV average-pool kernel");
    rank_->setObjectName("rank");
    r_min_->setObjectName("r_min");
    stride_->setObjectName("stride");
    window_->setObjectName("window");
    obs_window_->setObjectName("obs_window");
    anchors_->setObjectName("anchors");
    pool_kernel_->setObjectName("pool_kernel");
    cf->addRow("r_min", slider_row(r_min_slider_, r_min_));
    cf->addRow("Rank R", slider_row(rank_slider_, rank_));
    cf->addRow("Stride Δ", stride_);
    cf->addRow("Anchors c", anchors_);
    cf->addRow("Window w", window_);
    cf->addRow("Obs. window", obs_window_);
    cf->addRow("Pool kernel", pool_kernel_);
    // A budget-level setting (allocate() reads it, the analyses do not depend on it): live like kappa.
    coef_bits_ = new QComboBox;
    coef_bits_->setObjectName("coef_bits");
    coef_bits_->addItem("16 (cache precision)", 16);
    for (int bits : {8, 4, 3, 2}) coef_bits_->addItem(QString::number(bits), bits);
    coef_bits_->setToolTip(
        "Bits per stored VarRate/flat coefficient. 16 keeps them at the cache's precision; 8, 4, 3 or 2 "
        "quantizes them in groups of 32 along each token's rank (fp16 scale and minimum per group), and "
        "the budget, counted in bits, then holds more rank. Live after a run: re-allocates like κ. "
        "SnapKV and full ignore it; kivi2 / kivi4 have their own bits.");
    cf->addRow("Coefficient bits", coef_bits_);
    paper_accounting_ = new QCheckBox("Paper accounting (indices free)");
    precise_timing_ = new QCheckBox("Precise stage timing");
    cf->addRow(paper_accounting_);
    cf->addRow(precise_timing_);
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
    // Every codec setting is live once a run is kept; Enter in any of them asks for the answers at once.
    for (QAbstractSpinBox* box : std::initializer_list<QAbstractSpinBox*>{
             budget_, r_min_, rank_, stride_, anchors_, window_, obs_window_, pool_kernel_}) {
        box->installEventFilter(this);
        if (auto* d = qobject_cast<QDoubleSpinBox*>(box))
            connect(d, &QDoubleSpinBox::valueChanged, this, &RunPanel::emit_live_change);
        else
            connect(qobject_cast<QSpinBox*>(box), &QSpinBox::valueChanged, this, &RunPanel::emit_live_change);
    }
    connect(paper_accounting_, &QCheckBox::toggled, this, &RunPanel::emit_live_change);
    connect(coef_bits_, &QComboBox::currentIndexChanged, this, &RunPanel::emit_live_change);

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
    for (QCheckBox* c : {paper_accounting_, precise_timing_, chat_})
        connect(c, &QCheckBox::toggled, this, &RunPanel::settings_changed);
    connect(budget_, &QDoubleSpinBox::valueChanged, this, &RunPanel::settings_changed);
    for (QSpinBox* b : {r_min_, rank_, stride_, anchors_, window_, obs_window_, pool_kernel_, max_new_})
        connect(b, &QSpinBox::valueChanged, this, &RunPanel::settings_changed);
    for (QComboBox* b : {mode_, device_, dtype_, basis_, coef_bits_})
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
    for (const QCheckBox* c : methods_)
        if (c->isChecked()) s.methods.push_back(c->text().toStdString());
    s.codec.budget = budget_->value();
    s.codec.r_min = r_min_->value();
    s.codec.rank = rank_->value();
    s.codec.stride = stride_->value();
    s.codec.anchors = anchors_->value();
    s.codec.window = window_->value();
    s.codec.obs_window = obs_window_->value();
    s.codec.pool_kernel = pool_kernel_->value();
    s.codec.coef_bits = coef_bits_->currentData().toInt();
    s.codec.paper_accounting = paper_accounting_->isChecked();
    s.codec.precise_timing = precise_timing_->isChecked();
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
    const QSignalBlocker b1(rank_slider_), b2(r_min_slider_);
    rank_slider_->setRange(1, dim);
    r_min_slider_->setRange(0, dim);
    rank_slider_->setValue(rank_->value());
    r_min_slider_->setValue(r_min_->value());
}

void RunPanel::set_settings(const RunSettings& s) {
    // One change, not one per editor: a live run re-allocates once, when the caller says so.
    ++quiet_;
    set_questions(s.questions, s.answers, s.answer_prefixes);
    for (QCheckBox* c : methods_)
        c->setChecked(std::find(s.methods.begin(), s.methods.end(), c->text().toStdString()) !=
                      s.methods.end());
    budget_->setValue(s.codec.budget);
    r_min_->setValue(static_cast<int>(s.codec.r_min));
    rank_->setValue(static_cast<int>(s.codec.rank));
    stride_->setValue(static_cast<int>(s.codec.stride));
    anchors_->setValue(static_cast<int>(s.codec.anchors));
    window_->setValue(static_cast<int>(s.codec.window));
    obs_window_->setValue(static_cast<int>(s.codec.obs_window));
    pool_kernel_->setValue(static_cast<int>(s.codec.pool_kernel));
    // Any other value was refused when the settings were read (codec_json): 16 is the codec's default.
    coef_bits_->setCurrentIndex(std::max(0, coef_bits_->findData(static_cast<int>(s.codec.coef_bits))));
    paper_accounting_->setChecked(s.codec.paper_accounting);
    precise_timing_->setChecked(s.codec.precise_timing);
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
    RunSettings s = settings();
    s.codec = defaults;
    // Keep the user's paper-accounting / timing / SnapKV / coefficient-bits choices (a regime, not a property
    // of the model); only the width-dependent ones change.
    s.codec.paper_accounting = paper_accounting_->isChecked();
    s.codec.precise_timing = precise_timing_->isChecked();
    s.codec.pool_kernel = pool_kernel_->value();
    s.codec.coef_bits = coef_bits_->currentData().toInt();
    if (!recorded) s.codec.anchors = anchors_->value();
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

}  // namespace varrate::viz
