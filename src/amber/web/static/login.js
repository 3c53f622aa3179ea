"use strict";
document.getElementById("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = document.getElementById("token").value;
  const response = await fetch("/api/login", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({token}),
    credentials: "same-origin",
  });
  if (response.ok) {
    window.location.reload();
  } else {
    document.getElementById("login-error").textContent = "That is not the token.";
  }
});
