# ruff: noqa: RUF001  (translations are written in their own scripts)
"""Canned answers to a rejected message, by ISO 639-1 language (English is the fallback).

Shipped for the 25 most widely used languages; ``safety_reply(language)`` picks one.
"""

from __future__ import annotations

SAFETY_REPLIES: dict[str, str] = {
    "en": "I can't help with that request. If you or someone else is in danger, "
    "please contact your local emergency services.",
    "zh": "我无法协助处理这个请求。如果你或他人处于危险之中，请联系当地的紧急服务。",
    "es": "No puedo ayudar con esa solicitud. Si tú u otra persona estáis en peligro, "
    "contacta con los servicios de emergencia locales.",
    "hi": "मैं इस अनुरोध में मदद नहीं कर सकता। यदि आप या कोई और खतरे में है, "
    "तो कृपया अपनी स्थानीय आपातकालीन सेवाओं से संपर्क करें।",
    "ar": "لا أستطيع المساعدة في هذا الطلب. إذا كنت أنت أو أي شخص آخر في خطر، "
    "فيرجى الاتصال بخدمات الطوارئ المحلية.",
    "pt": "Não posso ajudar com esse pedido. Se você ou outra pessoa estiver em perigo, "
    "entre em contato com os serviços de emergência locais.",
    "bn": "আমি এই অনুরোধে সাহায্য করতে পারছি না। আপনি বা অন্য কেউ বিপদে থাকলে "
    "অনুগ্রহ করে স্থানীয় জরুরি পরিষেবার সাথে যোগাযোগ করুন।",
    "ru": "Я не могу помочь с этим запросом. Если вам или кому-то другому грозит опасность, "
    "обратитесь в местные экстренные службы.",
    "ja": "そのご依頼にはお応えできません。あなたや他の誰かが危険にさらされている場合は、"
    "地域の緊急サービスに連絡してください。",
    "de": "Bei dieser Anfrage kann ich nicht helfen. Wenn du oder jemand anderes in Gefahr "
    "ist, wende dich bitte an den örtlichen Notruf.",
    "fr": "Je ne peux pas vous aider avec cette demande. Si vous ou quelqu'un d'autre êtes "
    "en danger, contactez les services d'urgence locaux.",
    "it": "Non posso aiutarti con questa richiesta. Se tu o qualcun altro siete in pericolo, "
    "contatta i servizi di emergenza locali.",
    "ko": "이 요청은 도와드릴 수 없습니다. 본인이나 다른 사람이 위험에 처해 있다면 "
    "지역 응급 서비스에 연락하세요.",
    "tr": "Bu istekle ilgili yardımcı olamam. Siz ya da başka biri tehlikedeyse lütfen "
    "yerel acil durum hizmetlerine başvurun.",
    "vi": "Tôi không thể giúp với yêu cầu này. Nếu bạn hoặc ai đó đang gặp nguy hiểm, "
    "hãy liên hệ với dịch vụ khẩn cấp tại địa phương.",
    "pl": "Nie mogę pomóc w tej sprawie. Jeśli ty lub ktoś inny jesteście w niebezpieczeństwie, "
    "skontaktuj się z lokalnymi służbami ratunkowymi.",
    "nl": "Ik kan je niet helpen met dit verzoek. Als jij of iemand anders in gevaar is, "
    "neem dan contact op met de lokale hulpdiensten.",
    "id": "Saya tidak dapat membantu permintaan itu. Jika Anda atau orang lain dalam bahaya, "
    "hubungi layanan darurat setempat.",
    "th": "ฉันไม่สามารถช่วยในคำขอนี้ได้ หากคุณหรือผู้อื่นตกอยู่ในอันตราย โปรดติดต่อหน่วยบริการฉุกเฉินในพื้นที่",
    "fa": "نمی‌توانم در این درخواست کمک کنم. اگر شما یا شخص دیگری در خطر هستید، "
    "لطفاً با خدمات اورژانس محلی تماس بگیرید.",
    "uk": "Я не можу допомогти з цим запитом. Якщо вам або комусь іншому загрожує небезпека, "
    "зверніться до місцевих екстрених служб.",
    "ur": "میں اس درخواست میں مدد نہیں کر سکتا۔ اگر آپ یا کوئی اور خطرے میں ہے تو "
    "براہِ کرم مقامی ہنگامی خدمات سے رابطہ کریں۔",
    "sv": "Jag kan inte hjälpa till med den förfrågan. Om du eller någon annan är i fara, "
    "kontakta den lokala räddningstjänsten.",
    "sw": "Siwezi kusaidia na ombi hilo. Ikiwa wewe au mtu mwingine yuko hatarini, "
    "tafadhali wasiliana na huduma za dharura za eneo lako.",
    "el": "Δεν μπορώ να βοηθήσω με αυτό το αίτημα. Αν εσείς ή κάποιος άλλος κινδυνεύει, "
    "επικοινωνήστε με τις τοπικές υπηρεσίες έκτακτης ανάγκης.",
}


def safety_reply(language: str) -> str:
    """The canned rejection in ``language`` (``"pt-BR"`` → ``"pt"``), else English."""
    base = language.split("-", 1)[0].lower()
    return SAFETY_REPLIES.get(base, SAFETY_REPLIES["en"])
