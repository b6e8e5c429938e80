"""`PickerSelect` writes the same markup as wtforms' own `Select`, option by option (it only skips `html_params`)."""

from __future__ import annotations

import pytest
from wtforms import Form, SelectField
from wtforms.fields.choices import SelectChoice

from app.web.forms import PickerSelect

CHOICES = [
    SelectChoice("", "Nobody"),
    SelectChoice('a"<b>&', "Lab & <x> \"quoted\" 'single'"),
    SelectChoice("no-label", ""),
    SelectChoice("7f0c", "Zoë — ünïcode"),
    SelectChoice("attrs", "With attributes", render_kw={"disabled": True, "data_kind": "x"}),
]


class Plain(Form):
    pick = SelectField(choices=CHOICES)


class Picker(Form):
    pick = SelectField(choices=CHOICES, widget=PickerSelect())


@pytest.mark.parametrize("selected", ["", 'a"<b>&', "no-label", "7f0c", "attrs", "none of them"])
def test_the_markup_is_wtforms_own(selected):
    expected = Plain(data={"pick": selected}).pick(id="pick-id")
    assert Picker(data={"pick": selected}).pick(id="pick-id") == expected
    assert expected.count("<option") == len(CHOICES)


def test_values_and_labels_are_escaped():
    html = Picker(data={"pick": 'a"<b>&'}).pick()
    assert (
        '<option selected value="a&#34;&lt;b&gt;&amp;">Lab &amp; &lt;x&gt; &#34;quoted&#34; &#39;single&#39;</option>'
        in html
    )
    assert '<option value="no-label">no-label</option>' in html
