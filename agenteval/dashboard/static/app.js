// The dashboard's only script, served by the app (Content-Security-Policy: script-src 'self'). Pages work without
// it; it only lets Ctrl+Enter (Cmd+Enter) run the SQL page's statement.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const text = document.getElementById("sql-text");
  if (!text) return;
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      text.form.submit();
    }
  });
});
