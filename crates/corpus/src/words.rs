//! Word lists for the text generators: common English words in rough frequency order (so a
//! Zipf draw over the list gives English-like statistics), plus names, places and web words.

pub const COMMON: &str =
    "the of and to a in is that for it as was with be by on not he this are or his \
from at which but have an they you were their one all we can her has there been if more when will \
would who so no she other its after new people also two first time year years may only over some \
any them these most state said into could than many made about out up like what then world our \
government president city against between during under while since before found team back three \
week police officials company market percent public program both news four report still early \
where later long found called among because several million season group national home house \
great part end high since left each those much such here work school second system way well \
country number best last another until court every family water little while place without \
days told power small right business health support local general given next days area major \
law members should along late began including following known set united political nearly old \
party told united economic plan service around night money military league game held american \
president's south north east west party's county center open former near office based large \
forces top among war lead using month months agreement half according recent close per \
director research students war leader sunday monday tuesday wednesday thursday friday saturday \
election vote voters campaign senate congress minister prime foreign talks peace security \
attack troops officials killed injured fire storm weather rain snow wind coast flood highway \
road traffic airport flight airline travel hotel beach island river mountain valley park \
museum music film movie star actor actress festival award show television radio internet \
online web site computer software users email network mobile phone wireless data technology \
chip stock shares investors prices oil gas energy trade deal billion profit earnings quarter \
bank rates interest economy jobs workers union strike budget tax taxes spending deficit \
health hospital doctors patients drug study disease cancer heart virus vaccine medical care \
children parents women men young older life death trial judge jury case charges lawyer \
prison arrested suspect investigation evidence witness court's ruling appeal supreme \
school teachers university college students education science space shuttle mission \
scientists planet earth climate ocean species animals zoo garden food restaurant recipe \
wine coffee chicken dinner sports baseball football basketball soccer hockey golf tennis \
race coach player players fans stadium title championship cup victory defeat score points \
goal final round winner record history century decade anniversary celebration holiday \
church religious leaders community neighborhood residents village town capital region \
border troops army navy soldiers general officers commander rebels protest demonstrators \
crowd streets square building tower bridge construction project plans design architect \
artist gallery exhibition book author novel writer magazine newspaper editor reporter story \
stories photo photos video audio live update latest breaking special coverage analysis \
opinion editorial column letters weather forecast sunny cloudy showers temperatures degrees \
shopping sale price prices free offer order shipping delivery customer customers service \
account sign register login search help contact privacy terms advertise jobs careers about \
home page pages click here more read full continue previous next top back index archive \
important major serious simple clear strong quickly slowly really almost already always \
never often sometimes again together however although though despite whether either \
neither enough quite rather very too also even just only still yet soon later ago today \
tomorrow yesterday morning afternoon evening weekend spring summer autumn fall winter \
make makes made take takes took come comes came give gives gave find finds keep keeps \
know knows knew think thinks thought look looks looked want wants wanted use uses used \
say says tell tells ask asks asked try tries tried leave leaves need needs feel feels \
become becomes became show shows showed hear heard play plays played run runs ran move \
moves moved live lives lived believe believes bring brings brought happen happened write \
wrote provide provides sit stand lose lost pay paid meet met include includes continue \
continues learn learned change changed lead leads understand watch follow stop create \
speak read allow add spend grow open walk win offer remember love consider appear buy \
wait serve die send expect build stay fall cut reach kill remain suggest raise pass sell \
require decide return explain hope develop carry break receive agree support hit produce \
eat cover catch draw choose cause point listen realize place close involve increase";

pub const NAMES: &str = "Washington London Paris Berlin Tokyo Moscow Beijing Baghdad Jerusalem \
Chicago Boston Atlanta Houston Dallas Seattle Denver Miami Detroit Phoenix Portland Austin \
California Texas Florida Ohio Georgia Virginia Michigan Arizona Oregon Colorado Nevada \
Europe Asia Africa America Canada Mexico Brazil India China Japan Russia Germany France \
Italy Spain Britain Ireland Israel Egypt Iraq Iran Pakistan Afghanistan Korea Australia \
Smith Johnson Williams Brown Jones Miller Davis Wilson Anderson Taylor Thomas Moore Martin \
Jackson Thompson White Harris Clark Lewis Robinson Walker Young Allen King Wright Scott \
Green Baker Adams Nelson Hill Campbell Mitchell Roberts Carter Phillips Evans Turner Parker \
Collins Edwards Stewart Morris Murphy Cook Rogers Morgan Peterson Cooper Reed Bailey Bell \
Kelly Howard Ward Cox Richardson Wood Watson Brooks Bennett Gray James Reyes Cruz Hughes \
Price Myers Long Foster Sanders Ross Morales Powell Sullivan Russell Ortiz Jenkins Perry";

pub const WEB: &str = "header footer nav menu main content sidebar story stories headline \
teaser promo banner ad ads logo search box button link links list item items title subtitle \
byline caption photo image thumb gallery video player section column wrap wrapper container \
inner outer left right top bottom first last active selected hidden visible more tabs tab \
panel module widget feature features market markets quote quotes weather sports news \
business tech health travel entertainment politics world local opinion login signup \
account user profile share email print comment comments related popular latest breaking \
alert notice label input form field submit reset toggle dropdown overlay modal tooltip \
badge icon small large medium clear float grid row cell table odd even highlight";

/// Common words, most frequent first.
pub fn common() -> &'static [&'static str] {
    use std::sync::OnceLock;
    static W: OnceLock<Vec<&'static str>> = OnceLock::new();
    W.get_or_init(|| COMMON.split_whitespace().collect())
}

pub fn names() -> &'static [&'static str] {
    use std::sync::OnceLock;
    static W: OnceLock<Vec<&'static str>> = OnceLock::new();
    W.get_or_init(|| NAMES.split_whitespace().collect())
}

pub fn web() -> &'static [&'static str] {
    use std::sync::OnceLock;
    static W: OnceLock<Vec<&'static str>> = OnceLock::new();
    W.get_or_init(|| WEB.split_whitespace().collect())
}
