// The run explorer's one script: a filter change submits the form (the button still works without it).
(function () {
  "use strict";
  var form = document.getElementById("filters");
  if (!form) { return; }
  var selects = form.querySelectorAll("select[data-autosubmit]");
  for (var i = 0; i < selects.length; i++) {
    selects[i].addEventListener("change", function () { form.submit(); });
  }
})();
