// Every page: the header's switches (teaching mode, colour scheme) kept by a POST (the forms work
// without this script too; teaching mode then reloads the page, which the server renders with or
// without its notes), and the keyboard: j/k move between the steps of a conversation, o opens
// or closes the current step's bodies and field notes, t toggles teaching mode, c the class view, ? shows the help. A page with data-slide-prev/next links (the step-through) also gets ← and →.
(function () {
  "use strict";

  var root = document.documentElement;

  function post(form) {
    return fetch(form.action, {
      method: "POST",
      body: new FormData(form),
      headers: { "X-Requested-With": "fetch" },
      credentials: "same-origin",
    });
  }

  function setTeaching(on) {
    var form = document.querySelector(".teaching-form");
    root.dataset.teaching = on ? "on" : "off";
    if (!form) {
      return;
    }
    var button = form.querySelector("#teaching-toggle");
    button.setAttribute("aria-checked", on ? "true" : "false");
    form.querySelector('input[name="teaching"]').value = on ? "on" : "off";
    // The teaching layer is rendered by the server only for a user who has it on: once the
    // preference is kept, the page is rendered again with (or without) it.
    post(form).then(function () {
      form.querySelector('input[name="teaching"]').value = on ? "off" : "on";
      window.location.reload();
    });
  }

  function toggleTeaching() {
    setTeaching(root.dataset.teaching !== "on");
  }

  var teachingForm = document.querySelector(".teaching-form");
  if (teachingForm) {
    teachingForm.addEventListener("submit", function (event) {
      event.preventDefault();
      toggleTeaching();
    });
  }

  // The class view only hides and shows what the page already has: no reload.
  var classViewForm = document.querySelector(".class-view-form");
  function toggleClassView() {
    if (!classViewForm) {
      return;
    }
    var on = root.dataset.classView !== "on";
    var field = classViewForm.querySelector('input[name="class_view"]');
    root.dataset.classView = on ? "on" : "off";
    classViewForm.querySelector("#class-view-toggle").setAttribute("aria-checked", on ? "true" : "false");
    field.value = on ? "on" : "off";
    post(classViewForm);
    field.value = on ? "off" : "on";
  }
  if (classViewForm) {
    classViewForm.addEventListener("submit", function (event) {
      event.preventDefault();
      toggleClassView();
    });
  }

  var themeForm = document.querySelector(".theme-form");
  if (themeForm) {
    themeForm.querySelector("select").addEventListener("change", function (event) {
      root.dataset.theme = event.target.value;
      post(themeForm);
    });
  }

  var help = document.getElementById("help-dialog");
  function showHelp() {
    if (help && !help.open) {
      help.showModal();
    }
  }
  document.querySelectorAll(".help-open").forEach(function (button) {
    button.addEventListener("click", showHelp);
  });

  // ---- moving between steps ---------------------------------------------------------------

  function steps() {
    return Array.prototype.slice.call(document.querySelectorAll("section.step"));
  }

  // By id: a live update replaces a step's element, and the new one must stay current.
  var currentId = null;

  function current() {
    var step = currentId ? document.getElementById(currentId) : null;
    if (step && !step.classList.contains("is-current")) {
      step.classList.add("is-current");
    }
    return step;
  }

  // A live update replaces a row's element: the current step stays marked.
  new MutationObserver(function () {
    if (currentId) {
      current();
    }
  }).observe(document.body, { childList: true, subtree: true });

  function focusStep(step) {
    var before = current();
    if (before) {
      before.classList.remove("is-current");
    }
    currentId = step.id;
    step.classList.add("is-current");
    step.setAttribute("tabindex", "-1");
    step.focus({ preventScroll: true });
    step.scrollIntoView({ block: "start", behavior: "auto" });
  }

  function move(delta) {
    var all = steps();
    if (!all.length) {
      return;
    }
    var index = all.indexOf(current());
    if (index === -1) {
      // Nothing chosen yet: j starts at the first step below the top of the window.
      index = delta > 0 ? -1 : all.length;
      for (var i = 0; i < all.length; i++) {
        if (all[i].getBoundingClientRect().top > 1) {
          index = delta > 0 ? i - 1 : i;
          break;
        }
      }
    }
    var next = Math.min(Math.max(index + delta, 0), all.length - 1);
    focusStep(all[next]);
  }

  function toggleOpen() {
    var step = current() || steps()[0];
    if (!step) {
      return;
    }
    var bodies = step.querySelectorAll("details.payload, details.headers, details.teach-fields");
    var anyClosed = Array.prototype.some.call(bodies, function (details) {
      return !details.open;
    });
    bodies.forEach(function (details) {
      details.open = anyClosed;
    });
    if (!current()) {
      focusStep(step);
    }
  }

  function slide(direction) {
    var link = document.querySelector("[data-slide-" + direction + "]");
    if (link && link.href) {
      window.location.href = link.href;
    }
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) {
      return;
    }
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) {
      return;
    }
    var handled = true;
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "o":
        toggleOpen();
        break;
      case "t":
        toggleTeaching();
        break;
      case "c":
        toggleClassView();
        break;
      case "?":
        showHelp();
        break;
      case "ArrowRight":
        slide("next");
        break;
      case "ArrowLeft":
        slide("prev");
        break;
      default:
        handled = false;
    }
    if (handled) {
      event.preventDefault();
    }
  });
})();
