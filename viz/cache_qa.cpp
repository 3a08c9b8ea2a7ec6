#include "viz/cache_qa.h"

#include <QFileInfo>
#include <QLocale>

#include "codec/compressed_layer.h"
#include "codec/registry.h"
#include "codec/settings_table.h"

namespace varrate::viz {

CacheQa::CacheQa(QObject* parent) : QObject(parent) {}

void CacheQa::set_cache(std::shared_ptr<const OpenedCache> cache) {
    cache_ = std::move(cache);
    entries_.clear();
    Q_EMIT cache_changed();
    Q_EMIT entries_changed();
}

void CacheQa::add_answers(const CacheAnswers& a) {
    for (size_t i = 0; i < a.questions.size() && i < a.answers.size(); ++i) {
        Entry e;
        e.question = QString::fromStdString(a.questions[i]);
        if (i < a.answer_prefixes.size()) e.answer_prefix = QString::fromStdString(a.answer_prefixes[i]);
        e.answer = QString::fromStdString(a.answers[i]);
        if (i < a.answer_ids.size()) e.answer_ids = a.answer_ids[i];
        e.prefills = a.prefills;
        e.ms = a.ms;
        entries_.push_back(std::move(e));
    }
    Q_EMIT entries_changed();
}

void CacheQa::set_busy(bool busy) {
    busy_ = busy;
    Q_EMIT state_changed();
}

void CacheQa::set_status(const QString& text, bool error) {
    status_ = text;
    error_ = error;
    Q_EMIT state_changed();
}

void CacheQa::clear() {
    cache_.reset();
    entries_.clear();
    busy_ = false;
    status_.clear();
    error_ = false;
    Q_EMIT cache_changed();
    Q_EMIT entries_changed();
    Q_EMIT state_changed();
}

namespace {

QString bytes_text(int64_t bytes) {
    return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeSIFormat);
}

QString percent(double fraction) {
    return QString::number(100.0 * fraction, 'f', 2) + " %";
}

}  // namespace

QString cache_settings_text(const std::string& method, const CodecSettings& s) {
    if (!method_compresses(method)) return "uncompressed";
    // Only what the method reads (its traits): KIVI's footprint is set by its bits, SnapKV has no basis.
    const MethodTraits& traits = method_traits(method);
    const uint32_t reads = traits.reads;
    if (traits.budget == BudgetRule::OwnSettings && reads == 0)
        return QString("%1's own settings (κ not read)").arg(QString::fromStdString(method));
    QStringList parts;
    auto add = [&](uint32_t bit, const QString& text) {
        if (reads & bit) parts << text;
    };
    add(kReadsBudget, QString("κ %1").arg(s.budget, 0, 'g', 4));
    add(kReadsRankFloor, QString("r_min %1").arg(s.r_min));
    add(kReadsRank, QString("R %1").arg(s.rank));
    add(kReadsStride, QString("stride %1").arg(s.stride));
    add(kReadsAnchors, QString("anchors %1").arg(s.anchors));
    add(kReadsWindow, QString("window %1").arg(s.window));
    add(kReadsObsWindow, QString("obs. window %1").arg(s.obs_window));
    add(kReadsPool, QString("pool %1").arg(s.pool_kernel));
    add(kReadsCoefBits, s.coef_bits < 16 ? QString("%1-bit coefficients").arg(s.coef_bits)
                                         : QString("coefficients at cache precision"));
    add(kReadsKeyChannels, QString("%1 of key channels pruned").arg(s.key_channel_ratio, 0, 'g', 3));
    add(kReadsLayerProfile,
        s.layer_profile.empty()
            ? QString("no layer profile")
            : QString("layer profile %1")
                  .arg(QString::fromStdString(format_setting(*find_codec_setting("layer_profile"), s))));
    add(kReadsStreaming,
        QString("streaming heads keep %1 + %2 tokens").arg(s.streaming_sink).arg(s.streaming_recent));
    if ((reads & kReadsAccounting) && s.paper_accounting) parts << "paper accounting";
    return parts.join(" · ");
}

QString cache_summary_html(const OpenedCache& c) {
    const CacheFileInfo& i = c.context->info;
    const QString method = QString::fromStdString(i.method).toHtmlEscaped();
    QString h = QString("<b>%1</b> — %2<br>")
                    .arg(method, QString::fromStdString(method_description(i.method)).toHtmlEscaped());
    h += QString("Settings: %1<br>").arg(cache_settings_text(i.method, i.settings).toHtmlEscaped());
    h += QString("Context: %1 tokens%2, query-agnostic<br>")
             .arg(i.next_position)
             .arg(i.chat ? QString(" (chat template)") : QString());
    h += QString("Accounted: %1 of the full cache's %2 (%3) · resident: %4 (%5)<br>")
             .arg(bytes_text(i.stored_bytes), bytes_text(i.full_bytes), percent(i.footprint_fraction()),
                  bytes_text(i.resident_bytes), percent(i.resident_fraction()));
    if (const std::string how = store_attention_summary(c.context->stores); !how.empty())
        h += QString("Attention through the store: %1<br>").arg(QString::fromStdString(how).toHtmlEscaped());
    if (!i.basis_source.empty())
        h += QString("Basis: %1 (%2)%3<br>")
                 .arg(QString::fromStdString(i.basis_source).toHtmlEscaped(),
                      QString::fromStdString(i.basis_accounting).toHtmlEscaped(),
                      i.saved_shared_bytes > 0
                          ? QString("; %1 of basis rows saved with it").arg(bytes_text(i.saved_shared_bytes))
                          : QString());
    h += QString("File: %1 (%2), checked against %3 in %4 ms")
             .arg(QFileInfo(c.path).fileName().toHtmlEscaped(), bytes_text(c.file_bytes),
                  QFileInfo(c.model_dir).fileName().toHtmlEscaped())
             .arg(c.load_ms, 0, 'f', 0);
    for (const std::string& w : i.warnings)
        h += "<br><span style='color:#EBB839'>" + QString::fromStdString(w).toHtmlEscaped() + "</span>";
    return h;
}

QString cache_saved_text(const CacheSaveOutcome& o) {
    const CacheFileInfo& i = o.info;
    return QString(
               "Saved the %1 cache (%2) to %3: accounted %4 bytes (%5 of the full %6), resident %7 bytes "
               "(%8), file %9 bytes")
        .arg(QString::fromStdString(i.method), cache_settings_text(i.method, i.settings), o.path)
        .arg(i.stored_bytes)
        .arg(percent(i.footprint_fraction()))
        .arg(i.full_bytes)
        .arg(i.resident_bytes)
        .arg(percent(i.resident_fraction()))
        .arg(o.file_bytes);
}

}  // namespace varrate::viz
